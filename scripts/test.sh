#!/usr/bin/env bash
# THE test command (README, and CI through .ci/run): formatting, lints, docs, the
# whole test-suite against a real MariaDB, and the doc-tests. Stops at the
# first failure.
#
#   scripts/test.sh                 everything
#   scripts/test.sh worker_         extra arguments go to the test binaries of
#                                   `cargo test --all-targets` (here: a filter)
#   scripts/test.sh --quick         the inner loop: no clippy or docs build, and the slow suites (the
#                                   cluster, many hosts, TLS, server restarts, the browser, the bench,
#                                   the fault drains and the chaos run) left out; CI always runs everything
#
# Environment: JOBQ_TEST_THREADS (default 4) test threads; JOBQ_CHROMIUM (a Chromium
# binary; else scripts/ensure-chromium.sh finds or installs one); JOBQ_PROMTOOL (Prometheus's promtool;
# else scripts/ensure-promtool.sh finds or fetches one); JOBQ_GALERA_URLS (three node URLs,
# comma-separated; else scripts/galera.sh starts a cluster); JOBQ_DATABASE_URL /
# JOBQ_DB_PORT are honoured by scripts/ensure-mariadb.sh.
set -euo pipefail

# Work from the repo root whatever the caller's directory is.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

quick=""
if [[ "${1:-}" == "--quick" ]]; then
    quick=1
    shift
fi
# The suites --quick leaves out, by test name: each needs a service of its own (a cluster, a second
# server, a browser) or runs a drain under fire for many seconds.
slow=(--skip galera:: --skip hosts:: --skip tls:: --skip restart:: --skip browser:: --skip web_browser::
    --skip bench:: --skip transactional::effects_happen --skip _under_fire
    --skip partial_failure::)

step() { printf '\n==> %s\n' "$*"; }

# After a failed test run: each failing test's name and what it panicked with, a few lines each, as the
# last thing printed. The backtraces above can run to hundreds of lines, and a reader of the log's
# tail (a CI page) should not have to dig for the cause.
failure_digest() {
    step "what failed"
    awk '/^---- .* stdout ----$/ { name = $2; left = 0; next }
         /^thread .* panicked at / && name != "" { print name ": " $0; left = 8; next }
         left > 0 && /^(stack backtrace:|note: run with|---- |failures:$)/ { left = 0 }
         left > 0 { print "    " $0; left-- }' "$1"
}

# A fresh rustup install has rustfmt and clippy (default profile), but a
# "minimal" profile does not: add them rather than fail with a cryptic error.
for component in rustfmt clippy; do
    sub=${component/rustfmt/fmt}
    if ! cargo "$sub" --version >/dev/null 2>&1; then
        command -v rustup >/dev/null 2>&1 || {
            echo "test.sh: 'cargo $sub' is missing; install the $component component" >&2
            exit 1
        }
        step "rustup component add $component"
        rustup component add "$component"
    fi
done

step "scripts/ensure-mariadb.sh"
url=$(scripts/ensure-mariadb.sh)
export JOBQ_TEST_DATABASE_URL="$url"
# Never print a password into CI logs.
echo "JOBQ_TEST_DATABASE_URL=$(sed -E 's#(://[^:/@]*:)[^@/]*@#\1***@#' <<<"$url")"

if [[ -z "$quick" ]]; then
step "scripts/ensure-chromium.sh"
# The dashboard's end-to-end test drives headless Chromium (tests/it/browser.rs).
JOBQ_CHROMIUM=$(scripts/ensure-chromium.sh)
export JOBQ_CHROMIUM
echo "JOBQ_CHROMIUM=$JOBQ_CHROMIUM"

step "scripts/ensure-promtool.sh"
# The docs test runs the example alerting rules under `promtool test rules` (tests/it/docs.rs).
JOBQ_PROMTOOL=$(scripts/ensure-promtool.sh)
export JOBQ_PROMTOOL
echo "JOBQ_PROMTOOL=$JOBQ_PROMTOOL"

fi

step "scripts/ensure-languages.sh"
# Python, Node.js, PHP and Ruby with their MySQL drivers: the process handler's reference workers and
# the enqueue examples under clients/ run in the suite.
eval "$(scripts/ensure-languages.sh | tail -n 4)"
export JOBQ_PYTHON JOBQ_NODE JOBQ_PHP JOBQ_RUBY
echo "JOBQ_PYTHON=$JOBQ_PYTHON JOBQ_NODE=$JOBQ_NODE JOBQ_PHP=$JOBQ_PHP JOBQ_RUBY=$JOBQ_RUBY"

step "scripts/galera.sh start"
# The cluster tests (tests/it/galera.rs) run when a 3-node Galera cluster can start here; they say
# SKIPPED when it cannot. A cluster this script started is stopped again at the end (its data is kept,
# so the next run starts it in seconds); one that was already running is left running.
galera_started=""
if [[ -z "${JOBQ_GALERA_URLS:-}" && -z "$quick" ]]; then
    scripts/galera.sh running || galera_started=1
    if urls=$(scripts/galera.sh start); then
        JOBQ_GALERA_URLS=$(paste -sd, <<<"$urls")
        export JOBQ_GALERA_URLS
        echo "JOBQ_GALERA_URLS=$JOBQ_GALERA_URLS"
    else
        galera_started=""
        echo "no Galera cluster could start here (see the messages above): the cluster tests will be skipped"
    fi
fi
# Without a cluster the galera:: tests are left out by name, so the summary counts them as skipped
# rather than as passed.
skip=()
[[ -n "${JOBQ_GALERA_URLS:-}" ]] || skip=(--skip galera::)
[[ -z "$quick" ]] || skip=("${slow[@]}")
stop_galera() { [[ -n "$galera_started" ]] && scripts/galera.sh stop || true; }
trap stop_galera EXIT

step "cargo fmt --all -- --check"
cargo fmt --all -- --check

if [[ -z "$quick" ]]; then
    # The tests build the library with its `test-util` and `otel` features (Cargo.toml's
    # dev-dependencies), so --all-targets checks the code with them; the library and binaries alone
    # are checked again as users build them by default, without either.
    step "cargo clippy --all-targets -- -D warnings"
    cargo clippy --all-targets -- -D warnings
    step "cargo clippy --lib --bins -- -D warnings (no features)"
    cargo clippy --lib --bins -- -D warnings

    # The docs are part of the product: a broken intra-doc link fails like a lint.
    step "cargo doc --no-deps (warnings are errors)"
    RUSTDOCFLAGS="-D warnings" cargo doc --no-deps
fi

# Keep the test output to add up the counts at the end (see below).
results=$(mktemp)
trap 'rm -f "$results"; stop_galera' EXIT

step "cargo test --all-targets -- --test-threads=${JOBQ_TEST_THREADS:-4}${skip[*]:+ ${skip[*]}}${*:+ $*}"
status=0
cargo test --all-targets -- --test-threads="${JOBQ_TEST_THREADS:-4}" "${skip[@]}" "$@" 2>&1 | tee -a "$results" || status=$?
if ((status != 0)); then
    failure_digest "$results"
    exit "$status"
fi

step "cargo test --doc"
cargo test --doc 2>&1 | tee -a "$results"

if [[ -z "$quick" && $# -eq 0 ]]; then
    # The chaos run (tests/it/chaos.rs, docs/reliability.md) is minutes long, so the run above ignores
    # it; it runs here alone, where its faults cannot land on other tests' timings, and its one test
    # counts as passed or failed instead of skipped. A run for a filter leaves it out.
    step "scripts/chaos.sh --quick"
    chaos=$(mktemp)
    status=0
    scripts/chaos.sh --quick 2>&1 | tee "$chaos" || status=$?
    if ((status != 0)); then
        failure_digest "$chaos"
        exit "$status"
    fi
    awk '/^test result:/ { printf "chaos result: %d passed, %d failed\n", $4, $6 }' "$chaos" >> "$results"
    rm -f "$chaos"
fi

# cargo prints one "test result:" line per test binary, the last one being the
# doc-tests (possibly 0). One total line tells the whole story, for a human
# and for CI, which reads a closing "N passed, N failed" line.
step "all checks passed"
# Tests left out by --skip are "filtered out" in cargo's words: they count as skipped here.
awk '/^test result:/ { p += $4; f += $6; s += $8 + $12 }
     /^chaos result:/ { p += $3; f += $5; s -= $3 + $5 }
     END { printf "summary: %d passed, %d failed, %d skipped\n", p, f, s }' "$results"
