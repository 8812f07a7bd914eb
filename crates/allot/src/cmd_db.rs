//! `allot db init`: creates a store (schema and identity) and records it
//! in the data directory. `allot serve` never replaces a deleted, emptied
//! or swapped database by itself (see docs/server.md, "Store identity").
//! `allot db backup` / `allot db restore`: a consistent copy of a SQLite
//! store taken while it is served, and its checked return
//! (docs/operations.md, "Back up and restore").

use std::path::PathBuf;

use anyhow::{Context, Result};

#[derive(clap::Subcommand)]
pub enum DbCommand {
    /// Create the store if it does not exist (an existing one is kept as it is) and make the data directory
    /// belong to it; this is how a new, empty store replaces a lost one.
    Init(DbInitArgs),
    /// Replay the store's journal (every step its engine took, the restarts included) through the engine, and
    /// check that the replay made exactly what the store holds: every attempt (nodes, GPU indices, start,
    /// signal, end, outcome, kept progress) and every workload's state. With --policy, the same inputs under
    /// other rules (the live run's exits and reports as they came).
    Replay(DbReplayArgs),
    /// Copy a SQLite store to a new file, consistently (one commit's state) and while a server may be serving
    /// it. A PostgreSQL store is backed up with pg_dump (docs/operations.md).
    Backup(DbBackupArgs),
    /// Put a backup in place of a SQLite store, after checking that the file is an allot store this allot can
    /// serve, that no server serves the target and that the target holds no store (unless --force).
    Restore(DbRestoreArgs),
}

#[derive(clap::Args)]
pub struct DbBackupArgs {
    /// The store, as given to `allot serve --db`.
    #[arg(long, default_value = "sqlite://allot.db")]
    db: String,
    /// The backup file to write (must not exist).
    out: PathBuf,
}

#[derive(clap::Args)]
pub struct DbRestoreArgs {
    /// The store to restore into, as given to `allot serve --db`.
    #[arg(long, default_value = "sqlite://allot.db")]
    db: String,
    /// The backup file (made by `allot db backup`).
    input: PathBuf,
    /// Replace the store the target already holds (it is kept aside as `<db>.replaced-<unix time>`).
    #[arg(long)]
    force: bool,
}

#[derive(clap::Args)]
pub struct DbReplayArgs {
    /// The store, as given to `allot serve --db`.
    #[arg(long, default_value = "sqlite://allot.db")]
    db: String,
    /// Replay under this policy instead of the one the server ran (then
    /// nothing is checked against the store).
    #[arg(long)]
    policy: Option<String>,
    /// Write the replay's decision log, one JSON line per event (as
    /// `allot sim --log`).
    #[arg(long)]
    log: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct DbInitArgs {
    /// The store, as given to `allot serve --db`.
    #[arg(long, default_value = "sqlite://allot.db")]
    db: String,
    /// The data directory, as given to `allot serve --data-dir`.
    #[arg(long, default_value = "allot-data")]
    data_dir: PathBuf,
}

pub fn run(c: DbCommand) -> Result<()> {
    match c {
        DbCommand::Init(a) => init(a),
        DbCommand::Replay(a) => replay(a),
        DbCommand::Backup(a) => backup(a),
        DbCommand::Restore(a) => restore(a),
    }
}

fn backup(a: DbBackupArgs) -> Result<()> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")?;
    let c = rt
        .block_on(allot_server::store::backup::backup(&a.db, &a.out))
        .with_context(|| format!("failed to back up the store {} to {}", a.db, a.out.display()))?;
    eprintln!(
        "backed up store {} (schema version {}, {} bytes) from {} to {}",
        c.instance.as_deref().unwrap_or("never served"),
        c.schema,
        c.bytes,
        a.db,
        a.out.display()
    );
    Ok(())
}

fn restore(a: DbRestoreArgs) -> Result<()> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")?;
    let c = rt
        .block_on(allot_server::store::backup::restore(&a.db, &a.input, a.force))
        .with_context(|| format!("failed to restore {} into the store {}", a.input.display(), a.db))?;
    if let Some(aside) = &c.replaced {
        eprintln!("the store {} held before is kept as {}", a.db, aside.display());
    }
    eprintln!(
        "restored store {} (schema version {}, {} bytes) from {} into {}; a server whose data directory belongs to \
         another store refuses it until `allot db init --db {} --data-dir DIR` adopts it",
        c.instance.as_deref().unwrap_or("never served"),
        c.schema,
        c.bytes,
        a.input.display(),
        a.db,
        a.db
    );
    Ok(())
}

fn replay(a: DbReplayArgs) -> Result<()> {
    let policy = match &a.policy {
        Some(p) => Some(allot_core::PolicyKind::parse(p).with_context(|| {
            let known: Vec<&str> = allot_core::PolicyKind::ALL.iter().map(|k| k.as_str()).collect();
            format!("unknown policy {p:?} (known: {})", known.join(", "))
        })?),
        None => None,
    };
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")?;
    rt.block_on(async {
        let store = allot_server::store::Store::open_existing(&a.db)
            .await
            .with_context(|| format!("failed to open the store {}", a.db))?;
        let t0 = std::time::Instant::now();
        let replayed = allot_server::journal::replay(&store, policy)
            .await
            .with_context(|| format!("failed to replay the journal of {}", a.db))?;
        if replayed.steps == 0 {
            eprintln!("the store {} has no journal (never served, or written before schema version 20)", a.db);
        }
        eprintln!(
            "replayed {} steps of {} engine start(s) in {:.2} s: {} attempts, {} workloads",
            replayed.steps,
            replayed.starts,
            t0.elapsed().as_secs_f64(),
            replayed.attempts.len(),
            replayed.phases.len()
        );
        if let Some(path) = &a.log {
            let mut out = std::io::BufWriter::new(
                std::fs::File::create(path).with_context(|| format!("cannot write {}", path.display()))?,
            );
            for e in &replayed.log {
                serde_json::to_writer(&mut out, e)?;
                std::io::Write::write_all(&mut out, b"\n")?;
            }
            std::io::Write::flush(&mut out)?;
        }
        if policy.is_some() {
            return Ok(());
        }
        let diffs = allot_server::journal::differences(&store, &replayed).await?;
        if diffs.is_empty() {
            println!(
                "the replay equals the store: {} attempts (nodes, GPU indices, start, signal, end, outcome, kept progress) and {} workloads' states",
                replayed.attempts.len(),
                replayed.phases.len()
            );
            return Ok(());
        }
        for d in diffs.iter().take(20) {
            println!("{d}");
        }
        Err(allot_server::journal::JournalError::Differs { count: diffs.len() }.into())
    })
}

fn init(a: DbInitArgs) -> Result<()> {
    let rt =
        tokio::runtime::Builder::new_current_thread().enable_all().build().context("failed to start the runtime")?;
    let (id, before) = rt
        .block_on(allot_server::store::instance::init(&a.db, &a.data_dir))
        .with_context(|| format!("failed to initialise the store {}", a.db))?;
    match before {
        Some(old) => eprintln!(
            "store {} is {id}; the data directory {} belonged to store {old} and now belongs to this one",
            a.db,
            a.data_dir.display()
        ),
        None => eprintln!("store {} is {id}; the data directory {} belongs to it", a.db, a.data_dir.display()),
    }
    println!("{id}");
    Ok(())
}
