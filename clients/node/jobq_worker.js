// A jobq process handler in Node.js: protocol v1 (docs/process-protocol.md), standard library only.
//
// Copy this file next to your code, register a function per job kind and call run():
//
//   const { Worker, Retry, Fatal, Snooze, FINISHED } = require('./jobq_worker');
//   const worker = new Worker();
//   worker.handle('resize', async (job) => {
//     await makeThumbnail(job.payload.path);   // resolving: the job is done
//   });
//   worker.run();
//
// and in jobq.toml:
//
//   [handlers.resize]
//   process = ["/usr/bin/node", "/srv/app/resize_worker.js"]
//
// A handler that throws fails the attempt with the error's message (jobq retries it with backoff);
// throw new Retry(msg, 30) to name the delay (seconds, or a string such as "30s"), new Fatal(msg) to make
// the job dead at once, new Snooze("5m") to run it again later without using an attempt. Return FINISHED
// when the handler finished the job itself with CALL jobq_finish(job.id, job.claim, job.attempt) in its
// own committed transaction. Jobs run one at a time: the next request comes after the answer.
// While it runs, a handler may call job.progress(37.5, 'rows 375 of 1000') (a percent from 0 to 100, and
// a message or nothing) to show how far it has got, and set job.output to any JSON-able value the job
// leaves on its row when it is done.
//
// stdout belongs to the protocol: while run() runs, console.log and process.stdout.write go to stderr,
// which jobq logs under the job's id.
'use strict';

const fs = require('fs');
const readline = require('readline');

const PROTOCOL = 1;
const FINISHED = Symbol('jobq finished');

class Retry extends Error {
  constructor(message, retryIn) {
    super(message);
    this.retryIn = retryIn;
  }
}
class Fatal extends Error {}
class Snooze extends Error {
  constructor(delay) {
    super(`snooze ${delay}`);
    this.delay = delay;
  }
}

function send(message) {
  const bytes = Buffer.from(JSON.stringify(message) + '\n');
  let off = 0;
  while (off < bytes.length) {
    try {
      off += fs.writeSync(1, bytes, off);
    } catch (e) {
      if (e.code !== 'EAGAIN') throw e;
    }
  }
}

function messageOf(e) {
  const text = e && e.message !== undefined ? String(e.message).trim() : String(e).trim();
  return text || (e && e.constructor ? e.constructor.name : 'Error');
}

class Worker {
  constructor() {
    this.handlers = new Map();
  }

  // Registers fn(job) (it may be async) for jobs of `kind`.
  handle(kind, fn) {
    this.handlers.set(kind, fn);
    return this;
  }

  async answer(request) {
    const job = {
      id: request.id,
      kind: request.kind,
      queue: request.queue,
      attempt: request.attempt,
      maxAttempts: request.max_attempts,
      // With id and attempt, fences the application's own writes; also what jobq_finish takes.
      claim: request.claim,
      payload: request.payload,
      runAt: request.run_at,
      deadline: request.deadline,
      // The W3C trace context to continue (null without one): the parent of the job's own spans.
      traceparent: request.traceparent ?? null,
      output: undefined,
      progress(percent, message) {
        const line = { id: request.id, progress: percent };
        if (message !== undefined && message !== null) line.message = message;
        send(line);
      },
    };
    const fn = this.handlers.get(job.kind);
    if (!fn) return { id: job.id, ok: false, error: `no handler for kind ${JSON.stringify(job.kind)}` };
    try {
      const result = await fn(job);
      const answer = { id: job.id, ok: true };
      if (result === FINISHED) answer.finished = true;
      if (job.output !== undefined) answer.output = job.output;
      return answer;
    } catch (e) {
      if (e instanceof Snooze) return { id: job.id, snooze: e.delay };
      if (e instanceof Fatal) return { id: job.id, ok: false, error: messageOf(e), fatal: true };
      const answer = { id: job.id, ok: false, error: messageOf(e) };
      if (e instanceof Retry && e.retryIn !== undefined && e.retryIn !== null) answer.retry_in = e.retryIn;
      return answer;
    }
  }

  // Serves jobs until jobq closes stdin.
  async run() {
    const toStderr = process.stderr.write.bind(process.stderr);
    process.stdout.write = toStderr;
    console.log = console.error;
    console.info = console.error;
    console.debug = console.error;
    send({ jobq: PROTOCOL, ready: true });
    const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
    for await (const line of lines) {
      if (!line.trim()) continue;
      send(await this.answer(JSON.parse(line)));
    }
  }
}

module.exports = { Worker, Retry, Fatal, Snooze, FINISHED, PROTOCOL };
