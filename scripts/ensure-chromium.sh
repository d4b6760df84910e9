#!/usr/bin/env bash
# Make sure a headless-capable Chromium is installed and print its path as the LAST line on stdout
# (messages go to stderr):   chromium=$(scripts/ensure-chromium.sh)
#
# The dashboard's end-to-end test drives it (tests/it/web_browser.rs). Order of attempts:
#   1. $JOBQ_CHROMIUM, if set (checked; never replaced by something else).
#   2. chromium or chromium-browser on PATH.
#   3. apt-get install chromium (Debian's package; needs root, as the MariaDB install does).
#
# Safe to run any number of times; when Chromium is there it only runs `--version`.
set -euo pipefail

log() { printf 'ensure-chromium: %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}

works() { "$1" --version >/dev/null 2>&1; }

if [[ -n "${JOBQ_CHROMIUM:-}" ]]; then
    works "$JOBQ_CHROMIUM" || die "JOBQ_CHROMIUM=$JOBQ_CHROMIUM does not run ('$JOBQ_CHROMIUM --version' failed)"
    echo "$JOBQ_CHROMIUM"
    exit 0
fi

for name in chromium chromium-browser; do
    if path=$(command -v "$name") && works "$path"; then
        echo "$path"
        exit 0
    fi
done

command -v apt-get >/dev/null 2>&1 ||
    die "no chromium on PATH and no apt-get to install it; install Chromium or set JOBQ_CHROMIUM"
[[ $(id -u) -eq 0 ]] || die "no chromium on PATH; installing it needs root (apt-get install chromium)"
log "installing chromium (apt-get)"
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends chromium >&2; then
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends chromium >&2
fi
path=$(command -v chromium) || die "apt-get installed chromium but it is not on PATH"
works "$path" || die "$path --version failed after the install"
echo "$path"
