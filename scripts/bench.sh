#!/usr/bin/env bash
# Measure jobq on this machine's database server: `jobq bench` in a release build.
#
#   scripts/bench.sh                    the full run (about 10 minutes on 2 cores)
#   scripts/bench.sh --quick            the CI-sized run (seconds; proves it works, figures mean little)
#   scripts/bench.sh --json > out.json  for machines
#   scripts/bench.sh --sections raw,drain --jobs 20000 --big-rows 100000
#
# The bench creates a scratch database jobq_bench_<random> on the server that
# scripts/ensure-mariadb.sh finds (or JOBQ_DATABASE_URL names) and drops it at the end.
# The machine is often shared: the report prints the load average at start and end,
# and marks a run taken under load.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

url=$(scripts/ensure-mariadb.sh)
cargo build --release --quiet
# -q: the workers the bench starts log only warnings; progress lines still go to stderr.
exec target/release/jobq -q --database-url "$url" bench "$@"
