#!/usr/bin/env bash
# THE "run jobq" command (README): get a database, build, migrate, then
#   - without arguments: a demo (enqueue a job, let a worker run it, show it done);
#   - with arguments:    run `jobq ARGS...` instead, e.g. `scripts/run.sh worker --forever`.
set -euo pipefail

# Work from the repo root whatever the caller's directory is.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

step() { printf '\n==> %s\n' "$*"; }

step "scripts/ensure-mariadb.sh"
url=$(scripts/ensure-mariadb.sh)

step "cargo build --release"
cargo build --release
# Honour CARGO_TARGET_DIR like cargo did, so the binary we run is the one just built.
jobq="${CARGO_TARGET_DIR:-target}/release/jobq"

# jobq gets a database of its own on that server (JOBQ_DB_NAME, default jobq), not the shared one the
# URL may name. The jobq CLI reads its database and config from the environment.
export JOBQ_DATABASE_URL="${url%/*}/${JOBQ_DB_NAME:-jobq}"
export JOBQ_CONFIG="${JOBQ_CONFIG:-examples/jobq.toml}"
config=$JOBQ_CONFIG

step "jobq migrate --create-database"
"$jobq" migrate --create-database

if [[ $# -gt 0 ]]; then
    step "jobq $*"
    exec "$jobq" "$@"
fi

step "jobq enqueue demo.hello --payload '{\"name\":\"world\"}'"
"$jobq" enqueue demo.hello --payload '{"name":"world"}'
step "jobq enqueue demo.chain --payload '{\"name\":\"an SQL handler\"}'"
"$jobq" enqueue demo.chain --payload '{"name":"an SQL handler"}'

# Without --forever the worker drains the queue and exits 0.
step "jobq worker --config $config"
"$jobq" worker --config "$config"

step "jobq jobs list --limit 5"
"$jobq" jobs list --limit 5

step "jobq stats"
"$jobq" stats

cat <<NEXT

What next:
  export JOBQ_DATABASE_URL=$JOBQ_DATABASE_URL    # the database this demo used
  $jobq worker --forever --config $config    # keep a worker running (Ctrl-C stops it gracefully)
  $jobq --help                                           # all commands: enqueue, jobs, stats, ...
  scripts/run.sh worker --forever --config $config       # the same, with the set-up done for you
NEXT
