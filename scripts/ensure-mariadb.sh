#!/usr/bin/env bash
# Make sure a usable MariaDB/MySQL server is reachable and print the database
# URL to use as the LAST line on stdout. Every other message goes to stderr,
# so callers can simply do:   url=$(scripts/ensure-mariadb.sh)
#
# Order of attempts (first one that works wins):
#   1. $JOBQ_DATABASE_URL, if set (checked; never replaced by something else).
#   2. mysql://root@127.0.0.1:$JOBQ_DB_PORT/test  (CI / dev images that already
#      run a server with a password-less root over TCP).
#   3. mysql://jobq:jobq@127.0.0.1:$JOBQ_DB_PORT/jobq (the user step 4 creates).
#   4. Install mariadb-server (apt), start it without systemd if it is not
#      running, create the `jobq` user through the unix socket, print URL 3.
#
# Environment:
#   JOBQ_DATABASE_URL        use exactly this server (only checked)
#   JOBQ_DB_PORT             TCP port to look for / start the server on (3306)
#   JOBQ_DB_START_TIMEOUT    seconds to wait for a started server (60)
#
# Safe to run any number of times; when a server is already reachable it only
# runs one or two client queries (well under a second).
set -euo pipefail

PORT="${JOBQ_DB_PORT:-3306}"
START_TIMEOUT="${JOBQ_DB_START_TIMEOUT:-60}"
ROOT_URL="mysql://root@127.0.0.1:${PORT}/test"
JOBQ_URL="mysql://jobq:jobq@127.0.0.1:${PORT}/jobq"

log() { printf 'ensure-mariadb: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

[[ "$PORT" =~ ^[0-9]+$ ]] || die "JOBQ_DB_PORT must be a port number, got '${PORT}'"
[[ "$START_TIMEOUT" =~ ^[0-9]+$ ]] || die "JOBQ_DB_START_TIMEOUT must be a number of seconds"

# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------

# Installing and starting a server needs root. Use sudo when we are not root
# (a developer laptop), but only at the moment it is needed, so the fast path
# never prompts for a password.
run_root() {
    if [[ $EUID -eq 0 ]]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        die "need root to run '$*' (not root, and no sudo). Either run this as root,
install and start MariaDB yourself (apt-get install mariadb-server mariadb-client),
or set JOBQ_DATABASE_URL to a server you can use."
    fi
}

# Prefer the MariaDB names; the mysql* names are compatibility links on
# MariaDB and the only names on Oracle MySQL.
find_client() { command -v mariadb 2>/dev/null || command -v mysql 2>/dev/null || true; }
find_admin() { command -v mariadb-admin 2>/dev/null || command -v mysqladmin 2>/dev/null || true; }

# Daemons live in /usr/sbin, which is not on a normal user's PATH.
find_sbin() {
    local name dir
    for name in "$@"; do
        if command -v "$name" 2>/dev/null; then return 0; fi
        for dir in /usr/sbin /usr/local/sbin /usr/libexec /usr/bin; do
            if [[ -x "$dir/$name" ]]; then
                printf '%s\n' "$dir/$name"
                return 0
            fi
        done
    done
    return 0
}
find_server() { find_sbin mariadbd mysqld; }

# Percent-decoding, as URL parsers (sqlx's included) do for user/password/db.
urldecode() {
    local s="${1//\\/\\\\}"
    printf '%b' "${s//%/\\x}"
}

# parse_url URL -> sets U_SCHEME U_USER U_PASS U_HOST U_PORT U_DB U_SOCKET and
# U_MASKED (the URL with the password replaced by ***, for messages).
parse_url() {
    local url=$1 rest authority path query userinfo hostport raw_user raw_pass port_part kv
    case "$url" in
        mysql://* | mariadb://*) ;;
        *) return 1 ;;
    esac
    U_SCHEME=${url%%://*}
    rest=${url#*://}
    # The authority ends at the first '/', '?' or '#' (as in the URL standard);
    # a password containing those must be percent-encoded, for sqlx as well.
    authority=${rest%%[/?#]*}
    rest=${rest:${#authority}}
    path=${rest%%[?#]*}
    query=${rest:${#path}}
    query=${query#\?}
    query=${query%%#*}
    if [[ "$authority" == *@* ]]; then
        userinfo=${authority%@*}
        hostport=${authority##*@}
    else
        userinfo=""
        hostport=$authority
    fi
    raw_user=${userinfo%%:*}
    raw_pass=""
    [[ "$userinfo" == *:* ]] && raw_pass=${userinfo#*:}
    if [[ "$hostport" == \[* ]]; then # [IPv6]:port
        U_HOST=${hostport%%]*}
        U_HOST=${U_HOST#\[}
        port_part=${hostport#*]}
        port_part=${port_part#:}
    else
        U_HOST=${hostport%%:*}
        port_part=""
        [[ "$hostport" == *:* ]] && port_part=${hostport#*:}
    fi
    U_PORT=${port_part:-3306}
    [[ "$U_PORT" =~ ^[0-9]+$ ]] || return 1
    U_HOST=${U_HOST:-localhost}
    U_USER=$(urldecode "${raw_user:-root}") # sqlx's default user is root
    U_PASS=$(urldecode "$raw_pass")
    U_DB=$(urldecode "${path#/}")
    U_SOCKET=""
    local IFS='&'
    for kv in $query; do
        [[ "$kv" == socket=* ]] && U_SOCKET=$(urldecode "${kv#socket=}")
    done
    if [[ -n "$raw_pass" ]]; then
        U_MASKED="${U_SCHEME}://${raw_user}:***@${hostport}${path}${query:+?$query}"
    else
        U_MASKED="${U_SCHEME}://${userinfo:+$userinfo@}${hostport}${path}${query:+?$query}"
    fi
}

# url_query URL SQL -> runs SQL as the URL's user with the client, exactly the
# way the application connects (TCP unless the URL names a socket), ignoring
# ~/.my.cnf and /etc/mysql (--no-defaults) so local config cannot mask a
# broken URL. Output on stdout, client errors on stderr.
url_query() {
    local client sql=$2
    client=$(find_client)
    [[ -n "$client" ]] || return 1
    parse_url "$1" || return 1
    local args=(--no-defaults --connect-timeout=3 --batch --skip-column-names -u "$U_USER")
    if [[ -n "$U_SOCKET" ]]; then
        args+=(--protocol=SOCKET --socket="$U_SOCKET")
    else
        args+=(--protocol=TCP -h "$U_HOST" -P "$U_PORT")
    fi
    args+=(-e "$sql")
    [[ -n "$U_DB" ]] && args+=("$U_DB")
    # The password goes through MYSQL_PWD rather than -p so it does not show
    # up in `ps` and the client does not warn about it.
    if [[ -n "$U_PASS" ]]; then
        MYSQL_PWD="$U_PASS" "$client" "${args[@]}"
    else
        env -u MYSQL_PWD "$client" "${args[@]}"
    fi
}

# The test-suite creates and drops a database per test, so a candidate URL
# that merely logs in is not enough: it needs the global CREATE privilege.
HAS_CREATE_SQL="SELECT COUNT(*) FROM information_schema.USER_PRIVILEGES
 WHERE GRANTEE = CONCAT('''', SUBSTRING_INDEX(CURRENT_USER(), '@', 1), '''@''',
                        SUBSTRING_INDEX(CURRENT_USER(), '@', -1), '''')
   AND PRIVILEGE_TYPE = 'CREATE'"

# candidate_ok URL -> logs in over TCP and has CREATE on *.* (quietly).
candidate_ok() {
    local n
    n=$(url_query "$1" "$HAS_CREATE_SQL" 2>/dev/null) || return 1
    [[ "$n" =~ ^[1-9][0-9]*$ ]]
}

try_candidates() {
    local url
    for url in "$ROOT_URL" "$JOBQ_URL"; do
        if candidate_ok "$url"; then
            printf '%s\n' "$url"
            return 0
        fi
    done
    return 1
}

apt_install() {
    command -v apt-get >/dev/null 2>&1 ||
        die "no MariaDB/MySQL found and this is not a Debian/Ubuntu system (no apt-get).
Install MariaDB (server and client) yourself, or set JOBQ_DATABASE_URL."
    log "installing: $* (apt-get; this takes a minute on a fresh machine)"
    # Without systemd (containers, CI, chroots) the package's postinst would
    # start the server through /etc/init.d on the default port, or fail the
    # whole install when that port is busy. A temporary policy-rc.d (the
    # standard Debian switch for "don't start services from packages") keeps
    # the package from starting it; start_server does it below on $PORT.
    local policy=/usr/sbin/policy-rc.d added_policy=0
    if [[ ! -d /run/systemd/system && ! -e "$policy" ]]; then
        run_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy"
        added_policy=1
        trap 'run_root rm -f '"$policy" EXIT
    fi
    run_root apt-get update >&2
    run_root env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" >&2
    if [[ $added_policy -eq 1 ]]; then
        run_root rm -f "$policy"
        trap - EXIT
    fi
}

# mysqld_option NAME DEFAULT -> the value the server would start with,
# according to its configuration files (--print-defaults).
mysqld_option() {
    local name=$1 default=$2 word value="" words=()
    read -r -a words <<<"$("$SERVER_BIN" --print-defaults 2>/dev/null | tail -n +2 | tr '\n' ' ')"
    for word in "${words[@]}"; do
        # Later occurrences win, as for the server itself.
        [[ "$word" == --"$name"=* ]] && value=${word#*=}
    done
    printf '%s\n' "${value:-$default}"
}

# Server answers on its unix socket? mariadb-admin ping exits 0 even when the
# login is refused, so this needs neither root nor a password.
server_alive() {
    local admin
    admin=$(find_admin)
    if [[ -n "$admin" ]]; then
        "$admin" --no-defaults --socket="$SOCKET" --connect-timeout=2 ping >/dev/null 2>&1
    else
        [[ -S "$SOCKET" ]]
    fi
}

# Socket connection as the OS root: on a fresh Debian MariaDB, root@localhost
# is authenticated by unix_socket only, so this is the one way in.
root_socket_query() {
    local client
    client=$(find_client)
    run_root env -u MYSQL_PWD "$client" --no-defaults --socket="$SOCKET" -u root \
        --batch --skip-column-names -e "$1"
}

start_server() {
    local datadir pidfile logfile i
    datadir=$(mysqld_option datadir /var/lib/mysql)
    pidfile=$(mysqld_option pid-file /run/mysqld/mysqld.pid)
    logfile="${TMPDIR:-/tmp}/jobq-mariadbd.log"

    # The package runs mariadb-install-db itself, but a datadir wiped by
    # hand (or a server installed some other way) would make mariadbd exit.
    if ! run_root test -d "$datadir/mysql"; then
        local installdb
        installdb=$(find_sbin mariadb-install-db mysql_install_db)
        [[ -n "$installdb" ]] || die "datadir $datadir is empty and mariadb-install-db is missing"
        log "initialising empty datadir $datadir"
        run_root "$installdb" --user=mysql --datadir="$datadir" --skip-test-db >&2
    fi

    # /run is a tmpfs: after a reboot (or in a fresh container) the socket
    # directory is gone, and systemd-tmpfiles is not there to make it.
    run_root install -d -o mysql -g mysql -m 0755 "$(dirname "$SOCKET")" "$(dirname "$pidfile")"

    log "starting $SERVER_BIN on 127.0.0.1:$PORT (log: $logfile)"
    if [[ -d /run/systemd/system ]] && command -v systemctl >/dev/null 2>&1; then
        # A real systemd machine: let it own the service (it uses the
        # configured port; a mismatch with JOBQ_DB_PORT is reported below).
        run_root systemctl start mariadb >&2 || run_root systemctl start mysql >&2 || true
    elif command -v start-stop-daemon >/dev/null 2>&1; then
        # --pidfile: match only *this* server's pid, never another mariadbd
        # visible in the same process table (e.g. a chroot's host).
        # --user=mysql: mariadbd refuses to run as root without it.
        run_root start-stop-daemon --start --oknodo --background \
            --pidfile "$pidfile" --output "$logfile" --exec "$SERVER_BIN" -- \
            --user=mysql --port="$PORT" >&2 || true
    elif command -v mysqld_safe >/dev/null 2>&1; then
        run_root sh -c "nohup mysqld_safe --user=mysql --port=$PORT >'$logfile' 2>&1 &"
    else
        run_root service mariadb start >&2 || run_root service mysql start >&2 || true
    fi

    for ((i = 0; i < START_TIMEOUT * 2; i++)); do
        server_alive && return 0
        sleep 0.5
    done
    log "the server did not answer on $SOCKET within ${START_TIMEOUT}s; last lines of its logs:"
    tail -n 20 "$logfile" >&2 2>/dev/null || true
    run_root tail -n 20 "$(mysqld_option log-error /dev/null)" >&2 2>/dev/null || true
    die "could not start MariaDB"
}

# ---------------------------------------------------------------------------
# 1. An explicit URL is used as given, never replaced by another server.
# ---------------------------------------------------------------------------
if [[ -n "${JOBQ_DATABASE_URL:-}" ]]; then
    url=$JOBQ_DATABASE_URL
    parse_url "$url" || die "JOBQ_DATABASE_URL must look like mysql://USER:PASSWORD@HOST:PORT/DB (got a '${url%%:*}:' URL)"
    masked=$U_MASKED
    if [[ -z "$(find_client)" ]]; then
        # Only the client is needed to check it: a TCP probe would tell that
        # something listens, not that these credentials work.
        if [[ $EUID -eq 0 ]] || command -v sudo >/dev/null 2>&1; then
            apt_install mariadb-client
        elif (exec 3<>"/dev/tcp/$U_HOST/$U_PORT") 2>/dev/null; then
            log "WARNING: no mysql/mariadb client to check $masked; something listens on $U_HOST:$U_PORT, using it unchecked"
            printf '%s\n' "$url"
            exit 0
        else
            die "JOBQ_DATABASE_URL=$masked: nothing listens on $U_HOST:$U_PORT"
        fi
    fi
    if ! err=$(url_query "$url" "SELECT 1" 2>&1 >/dev/null); then
        die "JOBQ_DATABASE_URL=$masked does not work: ${err:-login failed}"
    fi
    printf '%s\n' "$url"
    exit 0
fi

# ---------------------------------------------------------------------------
# 2./3. Fast path: a server we can already use.
# ---------------------------------------------------------------------------
HAD_CLIENT=0
if [[ -n "$(find_client)" ]]; then
    HAD_CLIENT=1
    try_candidates && exit 0
fi

# ---------------------------------------------------------------------------
# 4. Slow path: install / start / create the user. Serialised with a lock so
# that two runs at once (parallel CI steps) do not both apt-get or start a
# second mariadbd; the loser then finds the work done.
# ---------------------------------------------------------------------------
LOCK="${TMPDIR:-/tmp}/jobq-ensure-mariadb.lock"
if command -v flock >/dev/null 2>&1 && touch "$LOCK" 2>/dev/null && [[ -w "$LOCK" ]]; then
    exec 9>>"$LOCK"
    flock -w 600 9 || die "timed out waiting for another ensure-mariadb.sh (lock $LOCK)"
    if [[ $HAD_CLIENT -eq 1 ]]; then try_candidates && exit 0; fi
fi

SERVER_BIN=$(find_server)
if [[ -z "$SERVER_BIN" ]]; then
    apt_install mariadb-server mariadb-client
    SERVER_BIN=$(find_server)
    [[ -n "$SERVER_BIN" ]] || die "mariadb-server installed but no mariadbd/mysqld found"
elif [[ -z "$(find_client)" ]]; then
    apt_install mariadb-client
fi

# The client was just installed: the URLs above were never checked. A server
# may well be running already (e.g. started by systemd during the install).
if [[ $HAD_CLIENT -eq 0 ]]; then try_candidates && exit 0; fi

SOCKET=$(mysqld_option socket /run/mysqld/mysqld.sock)
if ! server_alive; then
    start_server
fi

# Which port does the server on this socket really listen on? If another
# server (e.g. on 3306) owns the socket, creating the user there would not
# make the URL on $PORT work.
if ! actual=$(root_socket_query "SELECT @@port, @@skip_networking" 2>&1); then
    die "cannot log in as root through $SOCKET (${actual}).
This script relies on Debian's default unix_socket login for root. Either create
a user yourself and set JOBQ_DATABASE_URL, or run this script as root."
fi
read -r actual_port skip_net <<<"$actual"
if [[ "$actual_port" != "$PORT" ]]; then
    die "the MariaDB server on $SOCKET listens on port $actual_port, not JOBQ_DB_PORT=$PORT.
Unset JOBQ_DB_PORT (or set it to $actual_port), or set JOBQ_DATABASE_URL."
fi
[[ "$skip_net" == 0 ]] || die "the MariaDB server on $SOCKET runs with skip-networking; jobq connects over TCP"

# Idempotent: IF NOT EXISTS, and the password/grants are (re)applied every
# time. Three hosts because which one a TCP login matches depends on
# skip-name-resolve and on whether localhost resolves to 127.0.0.1 or ::1.
# ALL ON *.* WITH GRANT OPTION: the test-suite creates and drops one database
# per test and needs PROCESS (and KILL of its own connections).
log "creating user jobq and database jobq (through $SOCKET as root)"
sql="CREATE DATABASE IF NOT EXISTS jobq;"
for h in localhost 127.0.0.1 ::1; do
    sql+="CREATE USER IF NOT EXISTS 'jobq'@'$h' IDENTIFIED BY 'jobq';"
    sql+="ALTER USER 'jobq'@'$h' IDENTIFIED BY 'jobq';"
    sql+="GRANT ALL PRIVILEGES ON *.* TO 'jobq'@'$h' WITH GRANT OPTION;"
done
root_socket_query "$sql" >&2 || die "could not create the jobq user"

if ! err=$(url_query "$JOBQ_URL" "SELECT 1" 2>&1 >/dev/null); then
    parse_url "$JOBQ_URL"
    die "created user jobq, but $U_MASKED does not log in over TCP: $err"
fi
log "ready"
printf '%s\n' "$JOBQ_URL"
