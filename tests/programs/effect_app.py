#!/usr/bin/env python3
"""A test application behind jobq's HTTP handler: each job it is posted writes one row to `effects`.

    effect_app.py DATABASE_URL MODE

MODE `transactional` writes the row and calls `jobq_finish(id, claim, attempt)` in one transaction, and
answers `{"finished": true}` when the claim held (500 and a rollback when it did not). MODE `plain`
commits the row at once and answers an empty 200, leaving the finish to jobq: a job whose worker dies
after the commit runs again and writes a second row. Either way, a payload's `linger` (seconds) is how
long the job works after its row is written (default 0.02). The app prints its port, then `begin ID
ATTEMPT` once a job's row is written (committed in `plain` mode, not yet in `transactional`). Standard library and PyMySQL only.
"""
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlparse

import pymysql

URL = urlparse(sys.argv[1])
MODE = sys.argv[2]
local = threading.local()
say_lock = threading.Lock()


def say(line):
    with say_lock:
        print(line, flush=True)


def connection():
    conn = getattr(local, "conn", None)
    if conn is None:
        conn = pymysql.connect(
            host=URL.hostname,
            port=URL.port or 3306,
            user=unquote(URL.username or "root"),
            password=unquote(URL.password or ""),
            database=URL.path.lstrip("/"),
            autocommit=True,
        )
        local.conn = conn
    return conn


def run(job):
    conn = connection()
    linger = float(job["payload"].get("linger", 0.02))
    with conn.cursor() as cur:
        if MODE == "plain":
            cur.execute("INSERT INTO effects (job_id) VALUES (%s)", (job["id"],))
            say(f"begin {job['id']} {job['attempt']}")
            time.sleep(linger)
            return 200, {}
        conn.begin()
        cur.execute("INSERT INTO effects (job_id) VALUES (%s)", (job["id"],))
        say(f"begin {job['id']} {job['attempt']}")
        time.sleep(linger)
        cur.execute("CALL jobq_finish(%s, %s, %s)", (job["id"], job["claim"], job["attempt"]))
        (finished,) = cur.fetchone()
        while cur.nextset():
            pass
        if finished:
            conn.commit()
            return 200, {"finished": True}
        conn.rollback()
        return 500, {"error": "the claim no longer holds; rolled back"}


class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as a real application server

    def log_message(self, *args):
        pass

    def do_POST(self):
        job = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        try:
            status, answer = run(job)
        except Exception as e:  # a killed session, a lock wait: the attempt fails, jobq retries
            conn = getattr(local, "conn", None)
            local.conn = None
            if conn is not None:
                try:
                    conn.close()
                except Exception:
                    pass
            status, answer = 500, {"error": str(e)}
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        # A worker killed mid-request leaves a reset connection or a broken pipe: the test expects
        # that, and a traceback for it would only be noise in the suite's output.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


server = Server(("127.0.0.1", 0), App)
say(server.server_port)
server.serve_forever()
