"""Demo kinds for the process handler tests, served by the Python reference worker."""
import fcntl
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
from jobq_worker import FINISHED, Fatal, Retry, Snooze, Worker  # noqa: E402

if "--crash-on-start" in sys.argv:
    sys.stderr.write("demo: cannot start, no configuration\n")
    sys.exit(3)
if "--wrong-version" in sys.argv:
    sys.stdout.write('{"jobq":2,"ready":true}\n')
    sys.stdout.flush()
    sys.stdin.read()
    sys.exit(0)

if os.environ.get("DEMO_START_LOG"):
    with open(os.environ["DEMO_START_LOG"], "a") as f:
        f.write("%d\n" % os.getpid())

worker = Worker()


@worker.handler("echo")
def echo(job):
    print("echo says hello on stdout")
    with open(job.payload["file"], "a") as f:
        f.write("%d %s %d %s\n" % (os.getpid(), job.payload.get("text", ""), job.attempt, job.claim))


@worker.handler("traced")
def traced(job):
    with open(job.payload["file"], "a") as f:
        f.write("%s\n" % job.traceparent)


@worker.handler("fail")
def fail(job):
    raise RuntimeError("failed on purpose")


@worker.handler("later")
def later(job):
    raise Retry("rate limited", retry_in="1h")


@worker.handler("fatal")
def fatal(job):
    raise Fatal("bad input, never retry")


@worker.handler("snooze")
def snooze(job):
    raise Snooze("10m")


@worker.handler("sleep")
def sleep(job):
    with open(job.payload["file"], "a") as f:
        f.write("%d\n" % os.getpid())
    time.sleep(job.payload["secs"])


@worker.handler("recorded")
def recorded(job):
    """Records its copy in the payload's `effects` file as the tests' `history::recorded_command` does:
    holds the payload's `lock` file while it runs (a copy that finds it taken says so and fails), with
    a start and an end line on the host's clock. Attempt 1 sleeps `secs`, later ones `retry_secs`."""
    p = job.payload

    def line(what):
        with open(p["effects"], "a") as f:
            f.write("%s job=%s attempt=%s pid=%d at=%d claim=%s\n"
                    % (what, job.id, job.attempt, os.getpid(), time.time_ns() // 1000, job.claim))

    with open(p["lock"], "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            line("lock-taken")
            raise RuntimeError("another copy of the job holds its lock")
        line("start")
        time.sleep(p["secs"] if job.attempt == 1 else p["retry_secs"])
        line("end")


@worker.handler("overlap")
def overlap(job):
    """Marks its start and end in a shared file, so a test can count the jobs running at once."""
    with open(job.payload["file"], "a") as f:
        f.write("+%d\n" % os.getpid())
    time.sleep(job.payload["secs"])
    with open(job.payload["file"], "a") as f:
        f.write("-%d\n" % os.getpid())


@worker.handler("crash")
def crash(job):
    sys.stderr.write("demo: about to crash\n")
    sys.stderr.flush()
    os._exit(3)


@worker.handler("garbage")
def garbage(job):
    worker._out.write(b"this is not json\n")
    worker._out.flush()
    time.sleep(60)


@worker.handler("quit_soon")
def quit_soon(job):
    """Answers, then exits on its own while it waits for the next job."""
    import threading

    with open(job.payload["file"], "a") as f:
        f.write("%d\n" % os.getpid())
    threading.Timer(0.1, lambda: os._exit(4)).start()


@worker.handler("finished")
def finished(job):
    return FINISHED


@worker.handler("reported")
def reported(job):
    job.progress(50, "half way")
    job.output = {"n": job.payload.get("n"), "words": ["ünï", "<b>"]}


@worker.handler("report")
def report(job):
    """Reports progress twice, a second apart, and leaves an output."""
    job.progress(50, "half way")
    time.sleep(1.2)
    job.progress(100)
    job.output = {"n": job.payload.get("n"), "words": ["ünï", "<b>"]}


@worker.handler("pay")
def pay(job):
    """Writes a payment and finishes the job in the same transaction (PyMySQL, DEMO_DATABASE_URL)."""
    import pymysql
    from urllib.parse import unquote, urlparse

    u = urlparse(os.environ["DEMO_DATABASE_URL"])
    conn = pymysql.connect(host=u.hostname, port=u.port or 3306, user=unquote(u.username or ""),
                           password=unquote(u.password or ""), database=u.path.lstrip("/"), autocommit=False)
    try:
        with conn.cursor() as c:
            c.execute("INSERT INTO payments (job_id, amount) VALUES (%s, %s)", (job.id, job.payload["amount"]))
            c.execute("CALL jobq_finish(%s, %s, %s)", (job.id, job.claim, job.attempt))
            (finished,) = c.fetchone()
            while c.nextset():
                pass
        if not finished:
            conn.rollback()
            raise Retry("the job belongs to another attempt now")
        conn.commit()
        return FINISHED
    finally:
        conn.close()


worker.run()
