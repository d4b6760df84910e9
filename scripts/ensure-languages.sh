#!/usr/bin/env bash
# Make sure the language runtimes and MySQL drivers the suite runs jobq's clients with are installed:
# Python 3 (PyMySQL), Node.js (mysql2, from the npm registry into clients/node), PHP (CLI, PDO MySQL)
# and Ruby (mysql2). The process handler's reference workers (clients/*/jobq_worker.*) need only the
# interpreters; the enqueue examples (clients/*/enqueue.*) need the drivers too.
#
# Prints, as the LAST four lines on stdout, the interpreters as NAME=PATH (messages go to stderr):
#   eval "$(scripts/ensure-languages.sh)"   # sets JOBQ_PYTHON, JOBQ_NODE, JOBQ_PHP, JOBQ_RUBY
#
# Debian's packages, installed with apt-get when something is missing (needs root, as the MariaDB
# install does). Debian's own python3 is used rather than whatever `python3` is first on PATH, because
# python3-pymysql is installed for it. Safe to run any number of times: when everything is there it
# only asks each interpreter to load its driver.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'ensure-languages: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

python=/usr/bin/python3
node=/usr/bin/node
php=/usr/bin/php
ruby=/usr/bin/ruby

ready() {
    "$python" -c 'import pymysql' 2>/dev/null &&
        "$php" -r 'exit(extension_loaded("pdo_mysql") ? 0 : 1);' 2>/dev/null &&
        "$ruby" -e 'require "mysql2"' 2>/dev/null &&
        "$node" --version >/dev/null 2>&1
}

if ! ready; then
    command -v apt-get >/dev/null 2>&1 || die "missing runtimes or drivers and no apt-get to install them"
    [[ $(id -u) -eq 0 ]] || die "missing runtimes or drivers; installing them needs root (apt-get)"
    packages=(python3 python3-pymysql php-cli php-mysql ruby ruby-mysql2)
    # Node.js may come from elsewhere (NodeSource); only install Debian's when there is none.
    command -v node >/dev/null 2>&1 || packages+=(nodejs npm)
    log "installing ${packages[*]} (apt-get)"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -q --no-install-recommends "${packages[@]}" >&2; then
        apt-get update -q >&2
        apt-get install -y -q --no-install-recommends "${packages[@]}" >&2
    fi
    node=$(command -v node) || die "apt-get installed nodejs but node is not on PATH"
    ready || die "the runtimes are installed but a driver does not load (python3 pymysql, php pdo_mysql, ruby mysql2)"
fi

# The Node.js driver is not packaged by Debian: npm installs the version clients/node/package-lock.json
# names, into clients/node/node_modules (ignored by git).
if [[ -f clients/node/package.json && ! -d clients/node/node_modules/mysql2 ]]; then
    command -v npm >/dev/null 2>&1 || die "npm is missing (apt-get install npm)"
    log "npm ci in clients/node"
    (cd clients/node && npm ci --no-audit --no-fund --loglevel=error >&2)
fi

echo "JOBQ_PYTHON=$python"
echo "JOBQ_NODE=$node"
echo "JOBQ_PHP=$php"
echo "JOBQ_RUBY=$ruby"
