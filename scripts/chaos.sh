#!/usr/bin/env bash
# A chaos run (docs/reliability.md): a mixed workload on a private MariaDB server while random faults
# strike every part of jobq (SIGKILLs of workers, the supervisor, the reaper and the scheduler, killed
# sessions, network cuts through a relay, the server SIGKILLed and restarted). Then one history check
# of everything that ran, and a table. Exits non-zero when anything broke the promise.
#
#   scripts/chaos.sh                 10 minutes of faults
#   scripts/chaos.sh --quick         3 minutes (the last step of scripts/test.sh)
#   scripts/chaos.sh --seconds N     N seconds
#   scripts/chaos.sh --seed S        the choice of faults of the run that printed seed S
#   scripts/chaos.sh --cluster       on a database of the 3-node test cluster (scripts/galera.sh starts
#                                    it), whose nodes are killed and cut off instead of the server
#
# The table is printed and written to target/chaos-report.md (JOBQ_CHAOS_REPORT names another file).
# The run's files (logs of every process, what each job's copies recorded) stay in the directory it
# prints, for reading after a failure.
set -euo pipefail

# Work from the repo root whatever the caller's directory is.
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=600
test=chaos::run
while [[ $# -gt 0 ]]; do
    case $1 in
        --quick) seconds=180 ;;
        --seconds) seconds=${2:?--seconds needs a number}; shift ;;
        --seed) export JOBQ_CHAOS_SEED=${2:?--seed needs a number}; shift ;;
        --cluster) test=chaos::on_a_cluster ;;
        -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "chaos.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

# The run starts a server of its own from the MariaDB binaries this script makes sure are installed.
scripts/ensure-mariadb.sh >/dev/null
if [[ $test == chaos::on_a_cluster && -z "${JOBQ_GALERA_URLS:-}" ]]; then
    JOBQ_GALERA_URLS=$(scripts/galera.sh start | paste -sd,)
    export JOBQ_GALERA_URLS
fi

mkdir -p target
export JOBQ_CHAOS_SECS=$seconds
export JOBQ_CHAOS_REPORT=${JOBQ_CHAOS_REPORT:-target/chaos-report.md}
cargo test --test it -- --ignored --exact "$test" --nocapture
