#!/usr/bin/env bash
# Where a drain's time goes on the server: fills a scratch database with N no-op jobs, drains them
# with W worker processes (`jobq __bench-worker`, the library worker of `jobq bench`'s drain), and
# prints jobs/s and the server's and the workers' CPU per job read from /proc (so the server must run
# on this machine).
# With --alter it changes jobq's table after migrating, to measure what one part of the schema costs:
# CLAUSES is what follows `ALTER TABLE job_queue` (e.g. --alter 'DROP INDEX due_kinds').
# With --perf it also records the server with `perf record -g` during the drain and prints the
# statements' share of its samples (perf resolves the server's exported functions; InnoDB's own are
# not exported and show as addresses under the handler calls).
# With --callgrind the workers run under `valgrind --tool=callgrind` and it prints the instructions
# they executed per job: unlike CPU time, the same for the same build and drain however busy the
# machine is (within about 1 %), so it weighs a change to the worker's own code. The count includes
# each process's start (about 10 million instructions: 250 per job at 40,000 jobs); use --workers 1,
# whose claims fill whole batches, to compare builds.
# With --wire it captures the workers' traffic with tcpdump (the server must listen on this machine's
# loopback) and prints, with scripts/wire-gaps.py, the server's time and the client's time before each
# kind of statement on the busiest connections: with --workers 1 the claim connection shows how long
# the worker takes between a claim's statements and between one claim and the next.
#
#   scripts/drain-profile.sh [--jobs N] [--workers W] [--concurrency C] [--batch B] [--runs R] [--alter CLAUSES] [--perf] [--callgrind] [--wire]
#
# Needs a release build (cargo build --release) and a server at JOBQ_PROFILE_URL (default
# mysql://root@127.0.0.1:3306), on which it creates and drops the database jobq_profile.
set -euo pipefail

JOBS=100000 WORKERS=2 CONC=2000 BATCH=1000 RUNS=1 PERF=0 CALLGRIND=0 WIRE=0 ALTER=
while [ $# -gt 0 ]; do
  case "$1" in
    --jobs) JOBS=$2; shift 2 ;;
    --workers) WORKERS=$2; shift 2 ;;
    --concurrency) CONC=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --runs) RUNS=$2; shift 2 ;;
    --alter) ALTER=$2; shift 2 ;;
    --perf) PERF=1; shift ;;
    --wire) WIRE=1; shift ;;
    --callgrind) CALLGRIND=1; shift ;;
    -h|--help) sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "drain-profile: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done

[ "$CALLGRIND" = 0 ] || command -v valgrind >/dev/null ||
  { echo "drain-profile: --callgrind needs valgrind (Debian: apt-get install valgrind)" >&2; exit 1; }
[ "$WIRE" = 0 ] || { command -v tcpdump >/dev/null && command -v python3 >/dev/null; } ||
  { echo "drain-profile: --wire needs tcpdump and python3 (Debian: apt-get install tcpdump python3)" >&2; exit 1; }
ROOT=$(cd "$(dirname "$0")/.." && pwd)
JOBQ=${JOBQ:-$ROOT/target/release/jobq}
[ -x "$JOBQ" ] || { echo "drain-profile: no $JOBQ; run cargo build --release first" >&2; exit 1; }
BASE=${JOBQ_PROFILE_URL:-mysql://root@127.0.0.1:3306}
export JOBQ_DATABASE_URL=$BASE/jobq_profile
hostport=${BASE#mysql://}; user=${hostport%%@*}; hostport=${hostport#*@}
host=${hostport%%:*}; port=${hostport##*:}
sql() { mysql -u"$user" -h"$host" -P"$port" "$@"; }
# The server's own pid file: other servers (a test cluster's nodes) may run beside it.
PID=$(cat "$(sql -N -e 'SELECT @@pid_file')" 2>/dev/null) && [ -r "/proc/$PID/stat" ] ||
  { echo "drain-profile: the server at $BASE does not run on this machine (no readable pid file)" >&2; exit 1; }
ticks() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
# Undo records purge has still to clean up (committed transactions' history).
unpurged() { sql -N -e "SELECT COUNT FROM information_schema.INNODB_METRICS WHERE NAME = 'trx_rseg_history_len'"; }
# The CPU of this shell's waited-for children: the worker processes, read around their drain.
child_ticks() { awk '{print $16 + $17}' "/proc/$$/stat"; }
HZ=$(getconf CLK_TCK)
trap 'sql -e "DROP DATABASE IF EXISTS jobq_profile" >/dev/null 2>&1 || true' EXIT

for run in $(seq 1 "$RUNS"); do
  sql -e "DROP DATABASE IF EXISTS jobq_profile; CREATE DATABASE jobq_profile"
  "$JOBQ" migrate >/dev/null 2>&1
  [ -z "$ALTER" ] || sql jobq_profile -e "ALTER TABLE job_queue $ALTER"
  # MariaDB's sequence engine, else (MySQL 8) a recursive CTE.
  sql jobq_profile -e "INSERT INTO job_queue (kind) SELECT 'bench.noop' FROM seq_1_to_$JOBS" 2>/dev/null ||
    sql jobq_profile -e "SET SESSION cte_max_recursion_depth = $JOBS;
      INSERT INTO job_queue (kind) WITH RECURSIVE n (i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $JOBS)
      SELECT 'bench.noop' FROM n"
  sleep 2
  h0=$(unpurged)
  [ "$PERF" = 1 ] && { perf record -q -F 999 -g -p "$PID" -o /tmp/jobq-drain-profile.data 2>/dev/null & PERF_PID=$!; }
  if [ "$WIRE" = 1 ]; then
    tcpdump -i lo -nn -s 0 -w /tmp/jobq-drain-profile.pcap "tcp port $port" 2>/dev/null & WIRE_PID=$!
    sleep 1 # tcpdump listens before the first worker connects
  fi
  c0=$(ticks); w0=$(child_ticks); t0=$(date +%s.%N)
  pids=()
  under=()
  [ "$CALLGRIND" = 1 ] && { rm -f /tmp/jobq-drain-profile.cg.*; under=(valgrind --tool=callgrind -q --callgrind-out-file=/tmp/jobq-drain-profile.cg.%p); }
  for _ in $(seq 1 "$WORKERS"); do
    "${under[@]}" "$JOBQ" __bench-worker --concurrency "$CONC" --batch-size "$BATCH" --kind bench.noop 2>/dev/null &
    pids+=($!)
  done
  wait "${pids[@]}"
  t1=$(date +%s.%N); c1=$(ticks); w1=$(child_ticks)
  # The server's work for the drain goes on in purge after it; count it, waiting up to 20 s.
  for _ in $(seq 1 100); do [ "$(unpurged)" -le $((h0 + 10)) ] && break; sleep 0.2; done
  c2=$(ticks)
  [ "$PERF" = 1 ] && { kill -INT "$PERF_PID"; wait "$PERF_PID" 2>/dev/null || true; }
  if [ "$WIRE" = 1 ]; then
    kill -INT "$WIRE_PID"; wait "$WIRE_PID" 2>/dev/null || true
    "$ROOT/scripts/wire-gaps.py" /tmp/jobq-drain-profile.pcap "$port"
  fi
  done_jobs=$(sql -N jobq_profile -e "SELECT COUNT(*) FROM job_queue WHERE state = 'done' AND attempts = 1")
  awk -v n="$JOBS" -v d="$done_jobs" -v t="$(echo "$t1 - $t0" | bc)" -v c="$((c1 - c0))" -v wc="$((w1 - w0))" -v cp="$((c2 - c0))" -v hz="$HZ" \
    -v w="$WORKERS" -v cc="$CONC" -v b="$BATCH" -v r="$run" \
    'BEGIN { printf "run %d, W=%d c=%d b=%d: %d jobs (%d done once) in %.2f s, %.0f jobs/s, server %.1f (%.1f with purge), workers %.1f µs CPU per job\n", r, w, cc, b, n, d, t, n / t, c / hz * 1e6 / n, cp / hz * 1e6 / n, wc / hz * 1e6 / n }'
  [ "$done_jobs" = "$JOBS" ] || { echo "drain-profile: only $done_jobs of $JOBS jobs done once" >&2; exit 1; }
  if [ "$CALLGRIND" = 1 ]; then
    total=0
    for f in /tmp/jobq-drain-profile.cg.*; do
      n=$(callgrind_annotate "$f" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
      total=$((total + n))
    done
    echo "run $run: the workers executed $total instructions, $((total / JOBS)) per job (callgrind)"
  fi
done

if [ "$PERF" = 1 ]; then
  echo "the server's samples by statement (inclusive):"
  perf report -i /tmp/jobq-drain-profile.data --children --sort symbol --stdio -g none 2>/dev/null |
    grep -E "\] (mysql_multi_update|mysql_update|handle_select|mysql_handle_single_derived|handler::ha_update_row|multi_update::send_eof|tpool::task_group::execute|trans_commit)( |$)" |
    awk '{ printf "  %7s  %s\n", $1, $4 }'
fi
