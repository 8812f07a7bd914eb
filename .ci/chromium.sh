#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the dashboard's browser tests
# (crates/allot-server/tests/dashboard_browser.rs):
#   ALLOT_CHROMEDRIVER=$(bash .ci/chromium.sh)
# Installs Debian's chromium and chromium-driver only when one is missing
# (as root, with .ci/lib.sh's apt helper), checks that both run and are of
# the same version, and prints chromedriver's path on stdout. A host that
# already has them needs no root. Diagnostics go to stderr; any failure is
# fatal.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

ci_apt_install chromium chromium-driver

driver=$(command -v chromedriver || true)
[ -n "$driver" ] || driver=/usr/lib/chromium/chromedriver
[ -x "$driver" ] || ci_die "chromium-driver is installed but no chromedriver is on PATH nor at $driver"
browser=$(command -v chromium || true)
[ -n "$browser" ] && [ -x "$browser" ] || ci_die "chromium is installed but no chromium is on PATH"

# The Debian wrapper prints shell noise on some hosts: keep the last line.
driver_version=$("$driver" --version 2>/dev/null | tail -1 | awk '{print $2}') \
  || ci_die "$driver --version failed"
browser_version=$("$browser" --version 2>/dev/null | tail -1 | awk '{print $2}') \
  || ci_die "$browser --version failed"
[ -n "$driver_version" ] && [ -n "$browser_version" ] \
  || ci_die "cannot read the versions of $driver ('$driver_version') and $browser ('$browser_version')"
[ "${driver_version%%.*}" = "${browser_version%%.*}" ] \
  || ci_die "chromedriver $driver_version does not drive Chromium $browser_version: upgrade both (apt-get install --only-upgrade chromium chromium-driver)"
ci_log "Chromium $browser_version ($browser), chromedriver $driver_version"
echo "$driver"
