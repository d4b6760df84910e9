#!/usr/bin/env python3
"""A test application run by jobq's process handler: each job writes one row to `effects`.

    effect_worker.py DATABASE_URL MODE [BEGUN_FILE [COPIES_FILE]]

Built on the reference worker (clients/python/jobq_worker.py). MODE `transactional` writes the row and
calls `jobq_finish(id, claim, attempt)` in one transaction and answers that it finished the job; a claim
that no longer holds rolls back and fails the attempt. MODE `plain` commits the row at once and leaves
the finish to jobq. A payload's `linger` (seconds, default 0.02) is how long the job works after its
row is written. With BEGUN_FILE, a line `ID ATTEMPT` is appended to it once a job's row is written.
With COPIES_FILE, each job's copy appends its start and, once it has done all its work, its end, in the
lines of tests/it/history.rs's `recorded_command` (`start job=ID attempt=N pid=PID at=MICROS claim=C`).
"""
import os
import sys
import time
from urllib.parse import unquote, urlparse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
import pymysql  # noqa: E402
from jobq_worker import FINISHED, Retry, Worker  # noqa: E402

URL = urlparse(sys.argv[1])
MODE = sys.argv[2]
BEGUN = sys.argv[3] if len(sys.argv) > 3 else None
COPIES = sys.argv[4] if len(sys.argv) > 4 else None
conn = None


def connection():
    global conn
    if conn is None:
        conn = pymysql.connect(
            host=URL.hostname,
            port=URL.port or 3306,
            user=unquote(URL.username or "root"),
            password=unquote(URL.password or ""),
            database=URL.path.lstrip("/"),
            autocommit=True,
        )
    return conn


def begun(job):
    """Notes that the job's row is written (committed in `plain` mode, not yet in `transactional`)."""
    if BEGUN:
        with open(BEGUN, "a") as f:
            f.write("%s %s\n" % (job.id, job.attempt))


def record(what, job):
    """Notes this copy's start or end, on the host's clock, as a test's history reads it."""
    if COPIES:
        with open(COPIES, "a") as f:
            f.write("%s job=%s attempt=%s pid=%s at=%d claim=%s\n"
                    % (what, job.id, job.attempt, os.getpid(), time.time_ns() // 1000, job.claim))


worker = Worker()


@worker.handler("effect")
def effect(job):
    global conn
    linger = float((job.payload or {}).get("linger", 0.02))
    record("start", job)
    try:
        c = connection()
        with c.cursor() as cur:
            if MODE == "plain":
                cur.execute("INSERT INTO effects (job_id) VALUES (%s)", (job.id,))
                begun(job)
                time.sleep(linger)
                record("end", job)
                return None
            c.begin()
            cur.execute("INSERT INTO effects (job_id) VALUES (%s)", (job.id,))
            begun(job)
            time.sleep(linger)
            cur.execute("CALL jobq_finish(%s, %s, %s)", (job.id, job.claim, job.attempt))
            (finished,) = cur.fetchone()
            while cur.nextset():
                pass
            if finished:
                c.commit()
                record("end", job)
                return FINISHED
            c.rollback()
            raise Retry("the claim no longer holds; rolled back")
    except pymysql.MySQLError as e:  # a killed session: start afresh next time, and retry the job
        try:
            conn.close()
        except Exception:
            pass
        conn = None
        raise Retry(str(e))


worker.run()
