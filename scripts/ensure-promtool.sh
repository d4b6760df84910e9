#!/usr/bin/env bash
# Make sure Prometheus's promtool is at hand and print its path as the LAST line on stdout (messages go
# to stderr):   promtool=$(scripts/ensure-promtool.sh)
#
# The docs test runs the example alerting rules (examples/alerts.yml) under `promtool test rules`
# (tests/it/docs.rs). Order of attempts:
#   1. $JOBQ_PROMTOOL, if set (checked; never replaced by something else).
#   2. promtool on PATH.
#   3. A copy this script made before, in target/tools/.
#   4. promtool taken out of Debian's `prometheus` package into target/tools/: the package is downloaded
#      (apt-get download) and unpacked there, not installed, so no Prometheus server is set up or
#      started on this machine and no root is needed, unless the package lists are missing (then
#      `apt-get update` runs, as root).
#
# Safe to run any number of times; when promtool is there it only runs `--version`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

log() { printf 'ensure-promtool: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

works() { "$1" --version >/dev/null 2>&1; }

if [[ -n "${JOBQ_PROMTOOL:-}" ]]; then
    works "$JOBQ_PROMTOOL" || die "JOBQ_PROMTOOL=$JOBQ_PROMTOOL does not run ('$JOBQ_PROMTOOL --version' failed)"
    echo "$JOBQ_PROMTOOL"
    exit 0
fi

if path=$(command -v promtool) && works "$path"; then
    echo "$path"
    exit 0
fi

tools="${CARGO_TARGET_DIR:-$PWD/target}/tools"
if works "$tools/promtool"; then
    echo "$tools/promtool"
    exit 0
fi

command -v apt-get >/dev/null 2>&1 && command -v dpkg-deb >/dev/null 2>&1 ||
    die "no promtool on PATH and no apt-get/dpkg-deb to fetch it; install Prometheus's promtool or set JOBQ_PROMTOOL"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# apt-get download fetches as the _apt user where it can: let it write here.
chmod 755 "$work"
log "fetching promtool from Debian's prometheus package (apt-get download; nothing is installed)"
if ! (cd "$work" && apt-get download -q prometheus >&2); then
    [[ $(id -u) -eq 0 ]] || die "apt-get download prometheus failed; 'apt-get update' (as root) may help"
    apt-get update -q >&2
    (cd "$work" && apt-get download -q prometheus >&2) || die "apt-get download prometheus failed"
fi
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$tools"
cp "$work/root/usr/bin/promtool" "$tools/promtool.tmp"
mv "$tools/promtool.tmp" "$tools/promtool"
works "$tools/promtool" || die "$tools/promtool --version failed after unpacking it"
echo "$tools/promtool"
