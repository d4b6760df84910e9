"""A jobq process handler in Python: protocol v1 (docs/process-protocol.md), standard library only.

Copy this file next to your code, register a function per job kind and call run():

    from jobq_worker import Worker, Retry, Fatal, Snooze, FINISHED

    worker = Worker()

    @worker.handler("resize")
    def resize(job):
        make_thumbnail(job.payload["path"])       # returning normally: the job is done

    worker.run()

and in jobq.toml:

    [handlers.resize]
    process = ["/usr/bin/python3", "/srv/app/resize_worker.py"]

While it runs, a handler may call job.progress(37.5, "rows 375 of 1000") (a percent from 0 to 100, and
a message or None) to show how far it has got, and set job.output to any JSON-able value the job leaves on
its row when it is done.

A handler that raises fails the attempt with the exception's message (jobq retries it with backoff);
raise Retry(msg, retry_in=30) to name the delay, Fatal(msg) to make the job dead at once, Snooze(300)
to run it again later without using an attempt. Return FINISHED when the handler finished the job itself
with CALL jobq_finish(job.id, job.claim, job.attempt) in its own committed transaction.

stdout belongs to the protocol: while run() runs, print() and anything else written to file descriptor 1
goes to stderr, which jobq logs under the job's id.
"""

import json
import os
import sys

PROTOCOL = 1

FINISHED = object()
"""Return this from a handler that finished its job itself with jobq_finish."""


class Retry(Exception):
    """Fail this attempt; jobq retries after `retry_in` (seconds or a string such as "30s")."""

    def __init__(self, message, retry_in=None):
        super().__init__(message)
        self.retry_in = retry_in


class Fatal(Exception):
    """Fail the job for good: it is dead at once."""


class Snooze(Exception):
    """Run the job again after `delay` (seconds or a string such as "5m"); the attempt does not count."""

    def __init__(self, delay):
        super().__init__("snooze %s" % (delay,))
        self.delay = delay


class Job:
    """One job as jobq sent it."""

    def __init__(self, request, send=None):
        self._send = send
        self.output = None
        self.id = request["id"]
        self.kind = request["kind"]
        self.queue = request.get("queue")
        self.attempt = request.get("attempt")
        self.max_attempts = request.get("max_attempts")
        # With id and attempt, fences the application's own writes: UPDATE … WHERE id = ? AND claim = ?
        # AND attempts = ? changes nothing once the claim is lost. Also what jobq_finish takes.
        self.claim = request.get("claim")
        self.payload = request.get("payload")
        self.run_at = request.get("run_at")
        self.deadline = request.get("deadline")
        # The W3C trace context to continue (None without one): pass it on as the `traceparent` header
        # of calls the job makes, or as the parent of its own spans.
        self.traceparent = request.get("traceparent")

    def progress(self, percent, message=None):
        """Reports how far the job has got: a percent from 0 to 100, and a short message or None."""
        line = {"id": self.id, "progress": percent}
        if message is not None:
            line["message"] = message
        if self._send is not None:
            self._send(line)


class Worker:
    def __init__(self):
        self.handlers = {}

    def handler(self, kind):
        """Decorator: registers the function for jobs of `kind`."""

        def register(fn):
            self.handlers[kind] = fn
            return fn

        return register

    def register(self, kind, fn):
        self.handlers[kind] = fn

    def run(self):
        """Serves jobs until jobq closes stdin."""
        # Keep the real stdout for the protocol; point file descriptor 1 (print, C libraries,
        # subprocesses) at stderr.
        out = os.fdopen(os.dup(1), "wb")
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self._out = out
        self._send({"jobq": PROTOCOL, "ready": True})
        for line in sys.stdin.buffer:
            if not line.strip():
                continue
            request = json.loads(line)
            self._send(self._answer(request))
        out.close()

    def _send(self, message):
        self._out.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self._out.flush()

    def _answer(self, request):
        job = Job(request, self._send)
        fn = self.handlers.get(job.kind)
        if fn is None:
            return {"id": job.id, "ok": False, "error": "no handler for kind %r in %s" % (job.kind, sys.argv[0])}
        try:
            result = fn(job)
        except Snooze as s:
            return {"id": job.id, "snooze": s.delay}
        except Fatal as e:
            return {"id": job.id, "ok": False, "error": _message(e), "fatal": True}
        except Retry as e:
            answer = {"id": job.id, "ok": False, "error": _message(e)}
            if e.retry_in is not None:
                answer["retry_in"] = e.retry_in
            return answer
        except Exception as e:  # noqa: BLE001 - every failure is the job's, not the worker's
            return {"id": job.id, "ok": False, "error": _message(e)}
        answer = {"id": job.id, "ok": True}
        if result is FINISHED:
            answer["finished"] = True
        if job.output is not None:
            answer["output"] = job.output
        return answer


def _message(e):
    text = str(e).strip()
    return text or type(e).__name__
