# The accounting database of a private Slurm cluster of .ci/slurm.sh
# (sourced by it, not run; needs BASE, CLUSTER_NAME, SLURM_CONF and the
# private munged's socket M/run/munge.socket from it).
#
# `.ci/slurm.sh start [instance] --accounting` (or ALLOT_SLURM_ACCOUNTING=1)
# gives the cluster what `sacct`, `sacctmgr`, `sshare` and fair share need:
#  * a private MariaDB: its own data directory ($BASE/mariadb/data, made by
#    mariadb-install-db), run as the mysql user with `--no-defaults` (the
#    host's /etc/mysql is never read), a socket under $BASE/mariadb/run, TCP
#    on 127.0.0.1 on a free port, its root reachable only through that
#    socket (unix_socket authentication), and a `slurm` user with a random
#    password for slurmdbd;
#  * a private slurmdbd: $BASE/etc/slurmdbd.conf (found beside SLURM_CONF),
#    the private munged's socket, a free port;
##  * the database emptied at every fresh start (slurmctld starts with `-c`,
#    forgetting its jobs; its job id counter goes on unless the instance was
#    purged), the cluster registered, QOS `normal`
#    (default), `high` (priority 100) and `low` (priority 0, UsageFactor 0.5),
#    and the account tree root → org → {teamA (share 3), teamB (share 1)}
#    with the host's own users root (teamA default, teamB), daemon (teamA) and
#    nobody (teamB); no user is added to the host;
#  * slurm.conf lines: accounting_storage/slurmdbd with gres/gpu in TRES
#    (and the typed gres/gpu:h100, gres/gpu:a100: not recorded otherwise),
#    AccountingStorageEnforce=associations,limits,qos, priority/multifactor
#    with explicit weights and a 10-minute decay half-life (time-compressed
#    for runs of minutes), PriorityCalcPeriod of one minute.
# Every daemon is stopped by the PID file recorded here (acct_stop), never by
# name. Jobs of users without an association are refused in this mode: the
# Allot Slurm tests use the cluster without accounting.

ACCT_DB=$BASE/mariadb
ACCT_QOS="normal high low"

acct_pidfiles() { echo "$BASE/run/slurmdbd.pid" "$BASE/run/mariadbd.pid"; }

# A SQL statement as the private MariaDB's root (through its socket only).
acct_sql() { mariadb --no-defaults -S "$ACCT_DB/run/mysqld.sock" -uroot --batch -e "$1"; }

acct_stop() {
  ci_stop_pidfiles "$BASE/run/slurmdbd.pid"
  ci_stop_pidfiles "$BASE/run/mariadbd.pid"
}

acct_ready() {
  ci_pid_alive "$BASE/run/mariadbd.pid" && ci_pid_alive "$BASE/run/slurmdbd.pid" \
    && timeout 10 sacctmgr -n show cluster "$CLUSTER_NAME" format=Cluster 2>/dev/null | grep -q .
}

# Free ports for MariaDB and slurmdbd, in $BASE/run/accounting.ports (before
# slurm.conf is written: it names slurmdbd's).
acct_ports() { ci_free_ports 2 >"$BASE/run/accounting.ports"; }

# Starts MariaDB and slurmdbd with an empty accounting database.
acct_start_daemons() {
  local db_port dbd_port password _
  read -r db_port dbd_port <"$BASE/run/accounting.ports"
  mkdir -p "$ACCT_DB/run" "$ACCT_DB/tmp"
  chown mysql:mysql "$ACCT_DB" "$ACCT_DB/run" "$ACCT_DB/tmp"
  chmod 755 "$ACCT_DB" "$ACCT_DB/run"
  chmod 700 "$ACCT_DB/tmp"
  if [ ! -d "$ACCT_DB/data/mysql" ]; then
    ci_log "creating a private MariaDB data directory in $ACCT_DB/data"
    rm -rf "$ACCT_DB/data"
    mariadb-install-db --no-defaults --user=mysql --datadir="$ACCT_DB/data" \
      --auth-root-authentication-method=socket --skip-test-db >"$ACCT_DB/install.log" 2>&1 \
      || { tail -20 "$ACCT_DB/install.log" >&2; ci_die "mariadb-install-db failed"; }
  fi
  ci_log "starting a private MariaDB on 127.0.0.1:$db_port"
  rm -f "$ACCT_DB/run/mariadbd.pid"
  setsid /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$ACCT_DB/data" \
    --tmpdir="$ACCT_DB/tmp" --socket="$ACCT_DB/run/mysqld.sock" --pid-file="$ACCT_DB/run/mariadbd.pid" \
    --port="$db_port" --bind-address=127.0.0.1 --skip-name-resolve --log-error="$ACCT_DB/error.log" \
    --innodb-buffer-pool-size=256M --innodb-log-file-size=64M --innodb-lock-wait-timeout=900 \
    --max-allowed-packet=16M </dev/null >/dev/null 2>&1 &
  for _ in $(seq 300); do
    [ -s "$ACCT_DB/run/mariadbd.pid" ] && acct_sql 'SELECT 1' >/dev/null 2>&1 && break
    sleep 0.1
  done
  [ -s "$ACCT_DB/run/mariadbd.pid" ] || { tail -20 "$ACCT_DB/error.log" >&2; ci_die "MariaDB did not start"; }
  cp "$ACCT_DB/run/mariadbd.pid" "$BASE/run/mariadbd.pid"
  acct_sql 'SELECT 1' >/dev/null || { tail -20 "$ACCT_DB/error.log" >&2; ci_die "MariaDB does not answer"; }

  password=$(head -c 18 /dev/urandom | base64 | tr '+/' '-_')
  acct_sql "DROP DATABASE IF EXISTS slurm_acct_db; CREATE DATABASE slurm_acct_db;
    CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1';
    ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$password';
    GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1'; FLUSH PRIVILEGES;" \
    || ci_die "could not create the accounting database"

  # slurmdbd finds slurmdbd.conf beside SLURM_CONF; it must be SlurmUser's, mode 600.
  cat >"$BASE/etc/slurmdbd.conf" <<EOF
# Allot's private test cluster ($CI_ROOT); written by .ci/slurm-accounting.sh
AuthType=auth/munge
AuthInfo=socket=$M/run/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=slurm
PidFile=$BASE/run/slurmdbd.pid
LogFile=$BASE/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$db_port
StorageUser=slurm
StoragePass=$password
StorageLoc=slurm_acct_db
EOF
  chown slurm:slurm "$BASE/etc/slurmdbd.conf"
  chmod 600 "$BASE/etc/slurmdbd.conf"

  ci_log "starting slurmdbd on 127.0.0.1:$dbd_port"
  slurmdbd
  for _ in $(seq 50); do
    ci_pid_alive "$BASE/run/slurmdbd.pid" && timeout 5 sacctmgr -n show cluster >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  tail -20 "$BASE/log/slurmdbd.log" >&2
  timeout 5 sacctmgr -n show cluster >&2 || true
  ci_die "slurmdbd does not answer"
}

# The slurm.conf lines of accounting and multifactor priority.
acct_slurm_conf() {
  local db_port dbd_port
  read -r db_port dbd_port <"$BASE/run/accounting.ports"
  cat <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
# To slurmdbd, clients and slurmctld take the munge socket from here (not AuthInfo).
AccountingStoragePass=$M/run/munge.socket
AccountingStorageTRES=gres/gpu,gres/gpu:h100,gres/gpu:a100
AccountingStorageEnforce=associations,limits,qos
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
PriorityType=priority/multifactor
PriorityDecayHalfLife=0-00:10:00
PriorityCalcPeriod=1
PriorityMaxAge=0-00:05:00
PriorityUsageResetPeriod=NONE
PriorityFavorSmall=NO
PriorityWeightAge=1000
PriorityWeightFairshare=10000
PriorityWeightJobSize=0
PriorityWeightPartition=0
PriorityWeightQOS=5000
PriorityWeightTRES=GRES/gpu=100
EOF
}

# The cluster, QOS, accounts and users (sacctmgr talks to slurmdbd alone).
acct_associations() {
  local c=$CLUSTER_NAME
  sacctmgr -i add cluster "$c" >/dev/null
  sacctmgr -i add qos high Priority=100 >/dev/null
  sacctmgr -i add qos low Priority=0 UsageFactor=0.5 >/dev/null
  sacctmgr -i add account org Cluster="$c" Description=org Organization=org >/dev/null
  sacctmgr -i add account teamA Cluster="$c" Parent=org Fairshare=3 Description=teamA Organization=org >/dev/null
  sacctmgr -i add account teamB Cluster="$c" Parent=org Fairshare=1 Description=teamB Organization=org >/dev/null
  sacctmgr -i add user root Cluster="$c" Account=teamA,teamB DefaultAccount=teamA \
    QOS="${ACCT_QOS// /,}" DefaultQOS=normal >/dev/null
  sacctmgr -i add user daemon Cluster="$c" Account=teamA DefaultAccount=teamA \
    QOS="${ACCT_QOS// /,}" DefaultQOS=normal >/dev/null
  sacctmgr -i add user nobody Cluster="$c" Account=teamB DefaultAccount=teamB \
    QOS="${ACCT_QOS// /,}" DefaultQOS=normal >/dev/null
}
