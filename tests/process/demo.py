"""Demo kinds for the process handler tests, served by the Python reference worker."""
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

worker = Worker()


@worker.handler("echo")
def echo(job):
    print("echo says hello on stdout")
    with open(job.payload["file"], "a") as f:
        f.write("%d %s %d %s\n" % (os.getpid(), job.payload.get("text", ""), job.attempt, job.claim))


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


@worker.handler("finished")
def finished(job):
    return FINISHED


worker.run()
