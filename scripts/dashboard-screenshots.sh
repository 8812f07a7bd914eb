#!/usr/bin/env bash
# Regenerates the dashboard's screenshots in docs/dashboard/ (shown in the
# README), from a run of the browser tests against a live `allot serve`:
#   bash scripts/dashboard-screenshots.sh
# The test (crates/allot-server/tests/dashboard_browser.rs) signs in as a
# researcher and then as the admin, and saves one PNG per page it visits
# (login, work, workload, rules, budgets, budget, queue, fleet, history,
# admin) at 1400 px wide, when ALLOT_SCREENSHOTS
# names a directory. Needs Chromium and chromedriver: .ci/chromium.sh
# installs them (as root) when they are missing. Old PNGs are removed
# first, so a page that is gone leaves no stale picture behind.
set -euo pipefail
cd "$(dirname "$0")/.."
out="$PWD/docs/dashboard"
ALLOT_CHROMEDRIVER=$(bash .ci/chromium.sh)
export ALLOT_CHROMEDRIVER
mkdir -p "$out"
rm -f "$out"/*.png
ALLOT_SCREENSHOTS="$out" cargo test --locked -p allot-server --test dashboard_browser -- --nocapture
ls -l "$out"
