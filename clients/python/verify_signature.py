#!/usr/bin/python3
"""Checking the Jobq-Signature of a request from a jobq HTTP handler, with the standard library only.

    python3 verify_signature.py SECRET_FILE "$JOBQ_SIGNATURE" < body

exits 0 when the header signs the body with the secret (the file's content less trailing white
space, as jobq reads it) at a time within five minutes of now, 1 otherwise. docs/http-handlers.md
explains the scheme; tests/it/http_handlers.rs runs this file on requests a jobq worker signed.
"""

import hashlib
import hmac
import re
import sys
import time

TOLERANCE = 300  # seconds between the signature's time and ours: refuses replays


def verify(secret: bytes, header: str, body: bytes, now: float | None = None) -> bool:
    """True when `header` signs the raw request `body` with `secret`, recently."""
    t, sigs = None, []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t":
            t = value
        elif key == "v1":
            sigs.append(value)
    if t is None or not re.fullmatch(r"\d+", t):
        return False
    if abs((time.time() if now is None else now) - int(t)) > TOLERANCE:
        return False
    expected = hmac.new(secret, t.encode() + b"." + body, hashlib.sha256).hexdigest()
    return any(hmac.compare_digest(expected, s) for s in sigs)


if __name__ == "__main__":
    with open(sys.argv[1], "rb") as f:
        secret = f.read().rstrip()
    body = sys.stdin.buffer.read()
    if not verify(secret, sys.argv[2], body):
        print("invalid or expired signature", file=sys.stderr)
        sys.exit(1)
