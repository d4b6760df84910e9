#!/usr/bin/python3
"""Enqueueing jobq jobs from Python with PyMySQL, inside the application's own transaction.

The functions take a cursor of the application's connection and write the rows `jobq enqueue`
writes; the caller commits them together with its own writes (or rolls everything back).
docs/clients.md explains each one; tests/it/clients.rs checks that they write the same rows as
`jobq enqueue`.

Run as a script, it enqueues the steps of a JSON document read from stdin (see docs/clients.md) in
one transaction, next to a row of the application's `orders` table (which it expects to exist),
and prints their ids as JSON:

    echo '{"steps": [{"kind": "mail.welcome", "payload": {"order": 7}}]}' |
        /usr/bin/python3 enqueue.py mysql://app:secret@127.0.0.1:3306/app
"""

import json
import os
import sys
from urllib.parse import unquote, urlsplit

import pymysql

ER_DUP_ENTRY = 1062

# The columns every insert names. A job that does not set an option gets the value the table's
# DEFAULT would give it, so the row is the same as if the column had been left out.
INSERT_JOBS = (
    "INSERT INTO job_queue"
    " (kind, payload, queue, priority, run_at, max_attempts, timeout_secs, unique_key, state)"
    " VALUES "
)
# run_at is the server's NOW(6) plus the delay: the application's clock and time zone do not matter.
ROW = "(%s, %s, %s, %s, NOW(6) + INTERVAL %s SECOND, %s, %s, %s, %s)"


def job_row(kind, payload=None, *, queue="default", priority=0, delay_secs=0,
            max_attempts=None, timeout_secs=None, unique_key=None, state="queued"):
    """The values of one job's row, in the order of INSERT_JOBS."""
    payload = json.dumps({} if payload is None else payload, ensure_ascii=False)
    return [kind, payload, queue, priority, delay_secs, max_attempts, timeout_secs, unique_key, state]


# region enqueue
def enqueue(cur, kind, payload=None, **options):
    """Inserts one job and returns its id. Options: queue, priority, delay_secs, max_attempts,
    timeout_secs, unique_key (but see enqueue_unique)."""
    cur.execute(INSERT_JOBS + ROW, job_row(kind, payload, **options))
    return cur.lastrowid  # LAST_INSERT_ID()


def enqueue_unique(cur, kind, payload, unique_key, **options):
    """Inserts a job holding unique_key, unless a live job of the kind holds it (queued, retry or
    running). Returns (id, existing): the new job's id, or the holder's."""
    if not 0 < len(unique_key.encode()) <= 255:
        raise ValueError("a unique key is 1 to 255 bytes")
    for _ in range(3):
        # A locking read sees the latest committed rows, not this transaction's snapshot.
        cur.execute("SELECT id FROM job_queue WHERE unique_live = %s AND kind = %s"
                    " LOCK IN SHARE MODE", (unique_key, kind))
        holder = cur.fetchone()
        if holder:
            return holder[0], True
        try:
            return enqueue(cur, kind, payload, unique_key=unique_key, **options), False
        except pymysql.err.IntegrityError as e:
            if e.args[0] != ER_DUP_ENTRY:
                raise
            # Another transaction inserted the key since the look-up: look again. The refused
            # insert is undone by itself; the transaction goes on.
    raise RuntimeError(f"unique key {unique_key!r} changed hands three times; try again")


def enqueue_after(cur, kind, payload, after_ids, until="done", **options):
    """Inserts a job that waits for the jobs of after_ids: until each is done (it is cancelled if
    one ends dead or cancelled), or with until="ended" until each has ended in any way (a batch's
    callback: its payload, an object, gains the outcome counts). Returns its id."""
    after_ids = sorted(set(after_ids))
    marks = ", ".join(["%s"] * len(after_ids))
    # Lock the jobs it waits for (their finish must see the new dependent) and check they exist.
    cur.execute(f"SELECT id FROM job_queue WHERE id IN ({marks}) FOR UPDATE", after_ids)
    missing = set(after_ids) - {row[0] for row in cur.fetchall()}
    if missing:
        raise ValueError(f"jobs {sorted(missing)} do not exist")
    # Their finish then queues (or cancels) the waiting job in the same transaction.
    cur.execute(f"UPDATE job_queue SET has_dependents = 1 WHERE id IN ({marks})", after_ids)
    job_id = enqueue(cur, kind, payload, state="waiting", **options)
    cur.executemany("INSERT INTO jobq_job_deps (job_id, after_id, until) VALUES (%s, %s, %s)",
                    [(job_id, after_id, until) for after_id in after_ids])
    return job_id


def enqueue_batch(cur, jobs):
    """Inserts many jobs with one multi-row INSERT; jobs are dicts of job_row's arguments.
    Returns their ids, in order."""
    rows = [job_row(**job) for job in jobs]
    cur.execute(INSERT_JOBS + ", ".join([ROW] * len(rows)), [v for row in rows for v in row])
    # LAST_INSERT_ID() is the first row's; the others follow at the server's step (1, or the
    # cluster's size on Galera).
    cur.execute("SELECT LAST_INSERT_ID(), @@auto_increment_increment")
    first, step = cur.fetchone()
    return [first + i * step for i in range(len(rows))]
# endregion enqueue


# region example
def example(conn, customer):
    """An order and its jobs, committed together. Returns the order's id."""
    with conn.cursor() as cur:
        conn.begin()
        try:
            cur.execute("INSERT INTO orders (customer) VALUES (%s)", (customer,))
            order_id = cur.lastrowid
            mail = enqueue(cur, "mail.order", {"order": order_id}, queue="mail", priority=-5)
            sync, _ = enqueue_unique(cur, "sync.customer", {"customer": customer},
                                     f"customer:{customer}")
            photos = enqueue_batch(cur, [{"kind": "photo.resize", "payload": {"n": n}}
                                         for n in range(3)])
            enqueue_after(cur, "order.report", {"order": order_id}, photos, until="ended")
            enqueue_after(cur, "order.ship", {"order": order_id}, [mail, sync])
            conn.commit()
        except BaseException:
            conn.rollback()
            raise
    return order_id
# endregion example


def connect(url):
    """A connection from a mysql://user:password@host:port/database URL."""
    u = urlsplit(url)
    return pymysql.connect(host=u.hostname or "127.0.0.1", port=u.port or 3306,
                           user=unquote(u.username or ""), password=unquote(u.password or ""),
                           database=u.path.lstrip("/"), charset="utf8mb4", autocommit=True)


def run(conn, spec):
    """Runs example() when spec names a customer ({"example": "ada"}); else enqueues spec's steps
    in one transaction with an orders row (rolled back when spec says "rollback": true). Returns
    {"order": id} for the example, else one result per step: {"id", "existing"} for a job,
    {"ids", "callback"} for a batch."""
    if "example" in spec:
        return {"order": example(conn, spec["example"])}
    results = []
    with conn.cursor() as cur:
        conn.begin()
        cur.execute("INSERT INTO orders (customer) VALUES (%s)", ("steps",))
        for step in spec["steps"]:
            if "batch" in step:
                ids = enqueue_batch(cur, step["batch"])
                callback = step.get("callback")
                if callback:
                    callback = enqueue_after(cur, callback.pop("kind"), callback.pop("payload", None),
                                             ids, until="ended", **callback)
                results.append({"ids": ids, "callback": callback})
                continue
            kind, payload = step.pop("kind"), step.pop("payload", None)
            after = [results[i]["id"] for i in step.pop("after", [])]
            if "unique_key" in step:
                job_id, existing = enqueue_unique(cur, kind, payload, step.pop("unique_key"), **step)
            elif after:
                job_id, existing = enqueue_after(cur, kind, payload, after, **step), False
            else:
                job_id, existing = enqueue(cur, kind, payload, **step), False
            results.append({"id": job_id, "existing": existing})
        if spec.get("rollback"):
            conn.rollback()
        else:
            conn.commit()
    return results


def main():
    url = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("DATABASE_URL")
    if not url:
        sys.exit("usage: enqueue.py DATABASE_URL < spec.json (or set DATABASE_URL)")
    conn = connect(url)
    try:
        print(json.dumps(run(conn, json.load(sys.stdin))))
    finally:
        conn.close()


if __name__ == "__main__":
    main()
