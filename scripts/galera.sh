#!/usr/bin/env bash
# A 3-node MariaDB Galera cluster on 127.0.0.1, for jobq's cluster tests, beside (never instead of) the
# server scripts/ensure-mariadb.sh looks after on 3306.
#
#   scripts/galera.sh start     install what is missing (galera-4, rsync), start the three nodes, wait
#                               until each is in a Primary component of 3; print the three URLs, one a
#                               line, on stdout (every other message goes to stderr)
#   scripts/galera.sh urls      print the URLs of a running cluster
#   scripts/galera.sh stop      stop the nodes (data kept; `start` brings the same cluster back)
#   scripts/galera.sh destroy   stop the nodes and delete their data
#   scripts/galera.sh status    each node's port, pid and cluster size
#   scripts/galera.sh running   exit 0 when all three nodes run, 1 otherwise
#   scripts/galera.sh kill N    SIGKILL node N (1-3), as a crash would; `start` brings it back
#   scripts/galera.sh isolate N on|off
#                               cut node N off from the other two (gmcast.isolate; it leaves the Primary
#                               component and refuses statements with error 1047), or let it rejoin
#   scripts/galera.sh watch [S] every S seconds (default 2), a line per node: its memory cgroup's usage and
#                               anonymous memory (rss), and its wsrep state, receive and send queues and
#                               last committed seqno; until interrupted (to catch a node's growth, below)
#
# Environment:
#   JOBQ_GALERA_DIR    where the nodes live (default: /tmp/jobq-galera)
#   JOBQ_GALERA_PORT   client port of node 1; nodes 2 and 3 take the next two (default 4306)
#   JOBQ_GALERA_START_TIMEOUT   seconds to wait for the cluster (default 90)
#   JOBQ_GALERA_MEMORY the most memory one node may take, in a memory cgroup of its own (default 4G;
#                      only as root where a cgroup memory controller is mounted; 0 for no limit)
#
# Each node: its own datadir, a 64 MiB buffer pool, rsync SST, Galera replication on 127.0.0.1 ports
# 14567+n (IST 14577+n, SST 14587+n). root logs in over TCP without a password, like the test server.
# A 1 GiB write-set cache (a file in the datadir) lets a node the tests killed rejoin by IST: a full
# rsync SST pauses its donor, whose queue of replicated write-sets then grows in memory for as long as
# the SST lasts (23 GB and the kernel's OOM killer, seen twice when one hung). The receive queue's
# hard limit ends such a node at 2 GiB instead of the machine. A node has also grown by about 350 MB/s
# under a heavy drain minutes after it took part in an incremental transfer (once a donor, once a
# joiner, MariaDB 10.11 with galera-4 26.4; the cause is not known, and it was seen before jobq's
# claims wrote the holdings lists of schema 38 as well as after: three workers draining 200,000 jobs on a
# fresh cluster grew each node by a few MB/s to 500-650 MB (most likely the write-set cache's pages as
# they were first written), and a node grew from 550 MB to its 4 GB limit in 17 s half a minute after
# another rejoined by IST). Each node runs in a memory cgroup of its own, so that such a node is killed
# at JOBQ_GALERA_MEMORY and the machine goes on; the cluster tests then see a node die, which jobq
# survives, and `start` brings it back. It was seen again on a cluster 7 minutes old: node 3, killed by
# one test and rejoined by SST and IST, grew to 4 GB and died a minute later during the next test; so
# the tests that kill or isolate a node end by making the cluster anew (`destroy`, `start`: 15 s). It was
# seen once more on a cluster 15 s old (node 3, just joined by SST and an IST of one write-set): a cluster
# test that finds a node down now makes the cluster anew before it starts, so only the test the node died
# in fails. A cluster started from nothing no longer makes its nodes join by SST (see seed_from_node_1).
# Watched from the nodes' memory cgroups (memory.stat every 2 s through two test runs and a full bench),
# the growth is anonymous memory (rss), not the write-set cache's mapped pages: node 2 of a cluster made
# anew, 8 s after it joined by an IST of the configuration changes, went from 126 MB to 2,624 MB in
# 25 s during a cluster test and stayed there, while nodes 1 and 3 held 130-150 MB. `watch` prints each
# node's memory beside its wsrep state and queues, to tell the next such growth from a queue that backs up.
set -euo pipefail

DIR="${JOBQ_GALERA_DIR:-/tmp/jobq-galera}"
BASE="${JOBQ_GALERA_PORT:-4306}"
TIMEOUT="${JOBQ_GALERA_START_TIMEOUT:-90}"
MEMORY="${JOBQ_GALERA_MEMORY:-4G}"
NODES=(1 2 3)

log() { printf 'galera: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

[[ "$BASE" =~ ^[0-9]+$ ]] || die "JOBQ_GALERA_PORT must be a port number, got '$BASE'"
port() { echo $((BASE + $1 - 1)); }
node_dir() { echo "$DIR/node$1"; }
url() { echo "mysql://root@127.0.0.1:$(port "$1")/test"; }
client() { mariadb --protocol=tcp -h 127.0.0.1 -P "$(port "$1")" -u root -N -B -e "$2" 2>/dev/null; }
pid_of() { cat "$(node_dir "$1")/mariadbd.pid" 2>/dev/null || true; }
alive() {
    local pid
    pid=$(pid_of "$1")
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null
}

install_missing() {
    local need=()
    [[ -e /usr/lib/galera/libgalera_smm.so ]] || need+=(galera-4)
    command -v rsync >/dev/null || need+=(rsync)
    command -v mariadbd >/dev/null || need+=(mariadb-server)
    ((${#need[@]} == 0)) && return 0
    command -v apt-get >/dev/null || die "missing ${need[*]} and no apt-get to install them"
    [[ $(id -u) -eq 0 ]] || die "missing ${need[*]}; installing needs root"
    log "installing ${need[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q --no-install-recommends "${need[@]}" >&2 ||
        { apt-get update -q >&2 && apt-get install -y -q --no-install-recommends "${need[@]}" >&2; }
}

write_config() {
    local n=$1 d members
    d=$(node_dir "$n")
    members="127.0.0.1:$((14567 + 1)),127.0.0.1:$((14567 + 2)),127.0.0.1:$((14567 + 3))"
    # As root the nodes run as mysql (mariadbd refuses root); otherwise as whoever runs this.
    local user_line=""
    [[ $(id -u) -eq 0 ]] && user_line="user=mysql"
    cat >"$d/my.cnf" <<CNF
[mariadbd]
$user_line
datadir=$d/data
socket=$d/mariadbd.sock
pid-file=$d/mariadbd.pid
log-error=$d/error.log
port=$(port "$n")
bind-address=127.0.0.1
skip-name-resolve
innodb_buffer_pool_size=64M
innodb_log_file_size=32M
max_connections=300
binlog_format=ROW
default_storage_engine=InnoDB
innodb_autoinc_lock_mode=2
wsrep_on=ON
wsrep_provider=/usr/lib/galera/libgalera_smm.so
wsrep_cluster_name=jobq_test
wsrep_node_name=node$n
wsrep_node_address=127.0.0.1:$((14567 + n))
wsrep_cluster_address=gcomm://$members
wsrep_provider_options="gmcast.listen_addr=tcp://127.0.0.1:$((14567 + n));ist.recv_addr=127.0.0.1:$((14577 + n));gcache.size=1G;gcs.recv_q_hard_limit=2G"
wsrep_sst_method=rsync
wsrep_sst_receive_address=127.0.0.1:$((14587 + n))
CNF
}

init_node() {
    local n=$1 d
    d=$(node_dir "$n")
    mkdir -p "$d"
    write_config "$n"
    own() { [[ $(id -u) -ne 0 ]] || chown -R mysql:mysql "$d"; }
    if [[ ! -d "$d/data/mysql" ]]; then
        mkdir -p "$d/data"
        own
        mariadb-install-db --defaults-file="$d/my.cnf" --auth-root-authentication-method=normal \
            --skip-test-db >"$d/install.log" 2>&1 || die "mariadb-install-db failed for node $n: see $d/install.log"
    fi
    own
}

# The cgroup.procs file of node $1's memory cgroup, made with the JOBQ_GALERA_MEMORY limit; nothing when
# there is no limit or no cgroup memory controller this user may write (cgroup v2, else v1).
memory_cgroup() {
    local name="jobq-galera-node$1" dir limit
    [[ "$MEMORY" == 0 || $(id -u) -ne 0 ]] && return 0
    if [[ -w /sys/fs/cgroup/cgroup.subtree_control ]] && grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
        dir="/sys/fs/cgroup/$name" limit=memory.max
    elif [[ -d /sys/fs/cgroup/memory && -w /sys/fs/cgroup/memory ]]; then
        dir="/sys/fs/cgroup/memory/$name" limit=memory.limit_in_bytes
    else
        return 0
    fi
    mkdir -p "$dir" 2>/dev/null && echo "$MEMORY" >"$dir/$limit" 2>/dev/null || {
        log "could not limit node $1's memory in $dir; it runs without a limit"
        return 0
    }
    echo "$dir/cgroup.procs"
}

start_node() {
    local n=$1 d extra=() procs
    d=$(node_dir "$n")
    alive "$n" && return 0
    [[ "$n" == 1 && "${BOOTSTRAP:-}" == 1 ]] && extra+=(--wsrep-new-cluster)
    # A cluster whose nodes were all killed: node 1 bootstraps again from its own data.
    if [[ "${extra[*]:-}" == --wsrep-new-cluster && -f "$d/data/grastate.dat" ]]; then
        sed -i 's/^safe_to_bootstrap: 0/safe_to_bootstrap: 1/' "$d/data/grastate.dat"
    fi
    procs=$(memory_cgroup "$n")
    # The shell joins the cgroup and becomes the node, so the node and its SST scripts are all in it.
    (setsid bash -c '[[ -z "$1" ]] || echo $$ >"$1"; shift; exec "$@"' _ "$procs" \
        mariadbd --defaults-file="$d/my.cnf" "${extra[@]}" </dev/null >>"$d/stdout.log" 2>&1 &)
}

# Waits until node $1 is in a Primary component of 3, ready and Synced; 1 (with a message) when it is not
# within the timeout. A node that rejoins after a state transfer is ready (it takes statements) while it
# is still Joined, applying the write-sets queued during the transfer; Synced says it has caught up.
wait_ready() {
    local n=$1 deadline=$((SECONDS + TIMEOUT)) size ready state
    while ((SECONDS < deadline)); do
        size=$(client "$n" "SHOW STATUS LIKE 'wsrep_cluster_size'" | awk '{print $2}') || true
        ready=$(client "$n" "SHOW STATUS LIKE 'wsrep_ready'" | awk '{print $2}') || true
        state=$(client "$n" "SHOW STATUS LIKE 'wsrep_local_state_comment'" | awk '{print $2}') || true
        [[ "$size" == 3 && "$ready" == ON && "$state" == Synced ]] && return 0
        sleep 0.5
    done
    log "node $n did not join a cluster of 3 within ${TIMEOUT}s (size=${size:-?}, ready=${ready:-?}, state=${state:-?}); see $(node_dir "$n")/error.log"
    return 1
}

# Starts node 1 as a new cluster from its own data and waits until it answers.
bootstrap_node_1() {
    log "bootstrapping node 1 on port $(port 1)"
    BOOTSTRAP=1 start_node 1
    local deadline=$((SECONDS + TIMEOUT))
    until client 1 "SELECT 1" >/dev/null; do
        ((SECONDS < deadline)) || die "node 1 did not start; see $(node_dir 1)/error.log"
        alive 1 || sleep 0.5
        sleep 0.3
    done
}

# Waits for node $1 to exit after a SIGTERM (a clean shutdown, which writes its position to
# grastate.dat), and SIGKILLs it after 20 s.
await_exit() {
    local i=0
    while alive "$1" && ((i < 100)); do sleep 0.2; i=$((i + 1)); done
    alive "$1" && kill -9 "$(pid_of "$1")" 2>/dev/null || true
}

# With every node stopped: nodes 2 and 3 become copies of node 1's data, stopped cleanly. Node 1
# bootstraps from its own data, and a node that applied more than node 1 before they stopped would refuse
# to join it ("Reversing history ... Must abort"); the cluster holds nothing but test databases, so the
# others take node 1's. A copy joins at node 1's position and takes only an IST of the configuration
# changes since (Galera 4 numbers them like write-sets), where an empty joiner takes a full rsync SST,
# during which its donor is paused and queues write-sets in memory: `start` from nothing took 18.7 and
# 20.9 s this way against 24.4 s. Node 1 needs a cluster position first: a fresh datadir has none (one
# bootstrap and a stop make it), and a node that crashed wrote -1 (a bootstrap recovers it from InnoDB).
seed_from_node_1() {
    local d1 n dn
    d1="$(node_dir 1)/data"
    if ! grep -Eq '^seqno:[[:space:]]*[0-9]+' "$d1/grastate.dat" 2>/dev/null; then
        bootstrap_node_1
        kill "$(pid_of 1)" 2>/dev/null || true
        await_exit 1
    fi
    for n in "${NODES[@]:1}"; do
        dn="$(node_dir "$n")/data"
        rm -rf "$dn"
        # The write-set cache is rebuilt empty; gvwstate.dat names node 1's own identity in the group.
        rsync -a --exclude galera.cache --exclude gvwstate.dat "$d1/" "$dn/" ||
            die "could not copy node 1's data to node $n"
        sed -i 's/^safe_to_bootstrap: 1/safe_to_bootstrap: 0/' "$dn/grastate.dat"
    done
    log "nodes 2 and 3 seeded from node 1's data"
}

# Starts what is not running and waits for a Primary component of 3.
bring_up() {
    if ! alive 1 && ! alive 2 && ! alive 3; then
        seed_from_node_1
        bootstrap_node_1
    fi
    for n in "${NODES[@]}"; do start_node "$n"; done
    for n in "${NODES[@]}"; do wait_ready "$n" || return 1; done
}

cmd_start() {
    command -v mariadb >/dev/null || install_missing
    install_missing
    for n in "${NODES[@]}"; do init_node "$n"; done
    # A node let back in after an isolation, on a busy machine, has been seen to stay in a component that is
    # not Primary (size 2, not ready) past the timeout; the nodes hold nothing but test databases, so the way out
    # is the one a cluster that lost every node takes: stop them all and bootstrap again from node 1.
    if ! bring_up; then
        log "restarting the whole cluster"
        cmd_stop
        bring_up || die "the cluster did not come back after a restart"
    fi
    client 1 "CREATE DATABASE IF NOT EXISTS test" >/dev/null
    log "cluster of 3 ready on ports $(port 1), $(port 2), $(port 3)"
    cmd_urls
}

cmd_urls() {
    for n in "${NODES[@]}"; do url "$n"; done
}

cmd_stop() {
    for n in "${NODES[@]}"; do
        local pid
        pid=$(pid_of "$n")
        [[ -n "$pid" ]] && kill "$pid" 2>/dev/null || true
    done
    for n in "${NODES[@]}"; do await_exit "$n"; done
    log "stopped"
}

cmd_destroy() {
    cmd_stop
    rm -rf "$DIR"
    log "destroyed $DIR"
}

cmd_status() {
    for n in "${NODES[@]}"; do
        local size
        size=$(client "$n" "SHOW STATUS LIKE 'wsrep_cluster_size'" | awk '{print $2}') || true
        printf 'node%s port %s pid %s cluster_size %s\n' "$n" "$(port "$n")" "$(pid_of "$n")" "${size:--}"
    done
}

# The memory cgroup directory of node $1 (see memory_cgroup), if there is one.
cgroup_dir() {
    local name="jobq-galera-node$1"
    if [[ -f "/sys/fs/cgroup/$name/memory.current" ]]; then
        echo "/sys/fs/cgroup/$name"
    elif [[ -f "/sys/fs/cgroup/memory/$name/memory.usage_in_bytes" ]]; then
        echo "/sys/fs/cgroup/memory/$name"
    fi
}

cmd_watch() {
    local every=${1:-2} n dir mem wsrep
    [[ "$every" =~ ^[0-9]+([.][0-9]+)?$ ]] || die "expected seconds between lines, got '$every'"
    while true; do
        for n in "${NODES[@]}"; do
            dir=$(cgroup_dir "$n")
            mem="memory -"
            if [[ -n "$dir" ]]; then
                # cgroup v2 names the usage memory.current and the anonymous memory "anon"; v1
                # memory.usage_in_bytes and "rss".
                if [[ -f "$dir/memory.current" ]]; then mem=$(<"$dir/memory.current"); else
                    mem=$(<"$dir/memory.usage_in_bytes"); fi
                mem="memory $((mem / 1048576))M anon $(awk '$1 == "anon" || $1 == "rss" {
                    printf "%dM", $2 / 1048576; exit }' "$dir/memory.stat")"
            fi
            wsrep=$(client "$n" "SHOW STATUS WHERE Variable_name IN ('wsrep_local_state_comment',
                'wsrep_local_recv_queue', 'wsrep_local_send_queue', 'wsrep_last_committed')" |
                awk '{ printf " %s=%s", substr($1, 7), $2 }') || true
            echo "$(date +%T) node$n $mem${wsrep:- (no answer)}"
        done
        sleep "$every"
    done
}

check_node() { [[ "${1:-}" =~ ^[123]$ ]] || die "expected a node number 1, 2 or 3, got '${1:-}'"; }

cmd_kill() {
    check_node "$1"
    local pid
    pid=$(pid_of "$1")
    [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null || die "node $1 is not running"
    while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    log "node $1 killed"
}

cmd_isolate() {
    check_node "$1"
    local flag
    case "${2:-}" in
    on) flag=1 ;;
    off) flag=0 ;;
    *) die "usage: scripts/galera.sh isolate N on|off" ;;
    esac
    # A node busy leaving or rejoining the cluster, on a loaded machine, can miss one connection: ask
    # for up to 10 s before giving up.
    local error
    for _ in $(seq 1 20); do
        if error=$(mariadb --protocol=tcp -h 127.0.0.1 -P "$(port "$1")" -u root -N -B \
            -e "SET GLOBAL wsrep_provider_options='gmcast.isolate=$flag'" 2>&1); then
            log "node $1 isolation $2"
            return 0
        fi
        sleep 0.5
    done
    die "node $1 did not answer in 10 s: $error"
}

case "${1:-}" in
running) alive 1 && alive 2 && alive 3 ;;
start) cmd_start ;;
urls) cmd_urls ;;
stop) cmd_stop ;;
destroy) cmd_destroy ;;
status) cmd_status ;;
kill) cmd_kill "${2:-}" ;;
isolate) cmd_isolate "${2:-}" "${3:-}" ;;
watch) cmd_watch "${2:-}" ;;
*) die "usage: scripts/galera.sh start|urls|stop|destroy|status|running|kill N|isolate N on|off|watch [S]" ;;
esac
