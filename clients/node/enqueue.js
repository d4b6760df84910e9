#!/usr/bin/env node
// Enqueueing jobq jobs from Node.js with mysql2, inside the application's own transaction.
//
// The functions take the application's connection (mysql2/promise) and write the rows `jobq
// enqueue` writes; the caller commits them together with its own writes (or rolls everything
// back). docs/clients.md explains each one; tests/it/clients.rs checks that they write the same
// rows as `jobq enqueue`.
//
// Run as a script, it enqueues the steps of a JSON document read from stdin (see docs/clients.md)
// in one transaction, next to a row of the application's `orders` table (which it expects to
// exist), and prints their ids as JSON:
//
//   echo '{"steps": [{"kind": "mail.welcome", "payload": {"order": 7}}]}' |
//       node enqueue.js mysql://app:secret@127.0.0.1:3306/app
'use strict';

const mysql = require('mysql2/promise');

const ER_DUP_ENTRY = 1062;

// The columns every insert names. A job that does not set an option gets the value the table's
// DEFAULT would give it, so the row is the same as if the column had been left out.
const INSERT_JOBS =
  'INSERT INTO job_queue' +
  ' (kind, payload, queue, priority, run_at, max_attempts, timeout_secs, unique_key, state)' +
  ' VALUES ';
// run_at is the server's NOW(6) plus the delay: the application's clock and time zone do not matter.
const ROW = '(?, ?, ?, ?, NOW(6) + INTERVAL ? SECOND, ?, ?, ?, ?)';

// The values of one job's row, in the order of INSERT_JOBS.
function jobRow(kind, payload, {
  queue = 'default', priority = 0, delay_secs = 0, max_attempts = null, timeout_secs = null,
  unique_key = null, state = 'queued',
} = {}) {
  return [kind, JSON.stringify(payload ?? {}), queue, priority, delay_secs, max_attempts,
    timeout_secs, unique_key, state];
}

// region enqueue
// Inserts one job and returns its id. Options: queue, priority, delay_secs, max_attempts,
// timeout_secs, unique_key (but see enqueueUnique).
async function enqueue(conn, kind, payload, options = {}) {
  const [result] = await conn.execute(INSERT_JOBS + ROW, jobRow(kind, payload, options));
  return result.insertId; // LAST_INSERT_ID()
}

// Inserts a job holding uniqueKey, unless a live job of the kind holds it (queued, retry or
// running). Returns {id, existing}: the new job's id, or the holder's.
async function enqueueUnique(conn, kind, payload, uniqueKey, options = {}) {
  const bytes = Buffer.byteLength(uniqueKey);
  if (bytes < 1 || bytes > 255) throw new RangeError('a unique key is 1 to 255 bytes');
  for (let round = 0; round < 3; round++) {
    // A locking read sees the latest committed rows, not this transaction's snapshot.
    const [holder] = await conn.execute(
      'SELECT id FROM job_queue WHERE unique_live = ? AND kind = ? LOCK IN SHARE MODE',
      [uniqueKey, kind]);
    if (holder.length > 0) return { id: holder[0].id, existing: true };
    try {
      const id = await enqueue(conn, kind, payload, { ...options, unique_key: uniqueKey });
      return { id, existing: false };
    } catch (e) {
      if (e.errno !== ER_DUP_ENTRY) throw e;
      // Another transaction inserted the key since the look-up: look again. The refused insert is
      // undone by itself; the transaction goes on.
    }
  }
  throw new Error(`unique key ${JSON.stringify(uniqueKey)} changed hands three times; try again`);
}

// Inserts a job that waits for the jobs of afterIds: until each is done (it is cancelled if one
// ends dead or cancelled), or with until 'ended' until each has ended in any way (a batch's
// callback: its payload, an object, gains the outcome counts). Returns its id.
async function enqueueAfter(conn, kind, payload, afterIds, options = {}) {
  const { until = 'done', ...jobOptions } = options;
  afterIds = [...new Set(afterIds)].sort((a, b) => a - b);
  const marks = afterIds.map(() => '?').join(', ');
  // Lock the jobs it waits for (their finish must see the new dependent) and check they exist.
  const [found] = await conn.execute(
    `SELECT id FROM job_queue WHERE id IN (${marks}) FOR UPDATE`, afterIds);
  const missing = afterIds.filter((id) => !found.some((row) => row.id === id));
  if (missing.length > 0) throw new Error(`jobs ${missing.join(', ')} do not exist`);
  // Their finish then queues (or cancels) the waiting job in the same transaction.
  await conn.execute(`UPDATE job_queue SET has_dependents = 1 WHERE id IN (${marks})`, afterIds);
  const id = await enqueue(conn, kind, payload, { ...jobOptions, state: 'waiting' });
  await conn.query('INSERT INTO jobq_job_deps (job_id, after_id, until) VALUES ?',
    [afterIds.map((afterId) => [id, afterId, until])]);
  return id;
}

// Inserts many jobs with one multi-row INSERT; jobs are {kind, payload, ...options}. Returns their
// ids, in order.
async function enqueueBatch(conn, jobs) {
  const values = jobs.flatMap(({ kind, payload, ...options }) => jobRow(kind, payload, options));
  await conn.execute(INSERT_JOBS + jobs.map(() => ROW).join(', '), values);
  // LAST_INSERT_ID() is the first row's; the others follow at the server's step (1, or the
  // cluster's size on Galera).
  const [[{ first, step }]] = await conn.query(
    'SELECT LAST_INSERT_ID() AS first, @@auto_increment_increment AS step');
  return jobs.map((_, i) => Number(first) + i * Number(step));
}
// endregion enqueue

// region example
// An order and its jobs, committed together. Returns the order's id.
async function example(conn, customer) {
  await conn.beginTransaction();
  try {
    const [order] = await conn.execute('INSERT INTO orders (customer) VALUES (?)', [customer]);
    const orderId = order.insertId;
    const mail = await enqueue(conn, 'mail.order', { order: orderId },
      { queue: 'mail', priority: -5 });
    const sync = await enqueueUnique(conn, 'sync.customer', { customer },
      `customer:${customer}`);
    const photos = await enqueueBatch(conn,
      [0, 1, 2].map((n) => ({ kind: 'photo.resize', payload: { n } })));
    await enqueueAfter(conn, 'order.report', { order: orderId }, photos, { until: 'ended' });
    await enqueueAfter(conn, 'order.ship', { order: orderId }, [mail, sync.id]);
    await conn.commit();
    return orderId;
  } catch (e) {
    await conn.rollback();
    throw e;
  }
}
// endregion example

// Runs example() when spec names a customer ({"example": "ada"}); else enqueues spec's steps in one
// transaction with an orders row (rolled back when spec says "rollback": true). Returns {order: id}
// for the example, else one result per step: {id, existing} for a job, {ids, callback} for a batch.
async function run(conn, spec) {
  if ('example' in spec) return { order: await example(conn, spec.example) };
  const results = [];
  await conn.beginTransaction();
  await conn.execute('INSERT INTO orders (customer) VALUES (?)', ['steps']);
  for (const step of spec.steps) {
    if ('batch' in step) {
      const ids = await enqueueBatch(conn, step.batch);
      let callback = null;
      if (step.callback) {
        const { kind, payload, ...options } = step.callback;
        callback = await enqueueAfter(conn, kind, payload, ids, { ...options, until: 'ended' });
      }
      results.push({ ids, callback });
      continue;
    }
    const { kind, payload, after = [], unique_key: uniqueKey, ...options } = step;
    const afterIds = after.map((i) => results[i].id);
    if (uniqueKey !== undefined) {
      results.push(await enqueueUnique(conn, kind, payload, uniqueKey, options));
    } else if (afterIds.length > 0) {
      results.push({ id: await enqueueAfter(conn, kind, payload, afterIds, options), existing: false });
    } else {
      results.push({ id: await enqueue(conn, kind, payload, options), existing: false });
    }
  }
  if (spec.rollback) await conn.rollback();
  else await conn.commit();
  return results;
}

async function main() {
  const url = process.argv[2] || process.env.DATABASE_URL;
  if (!url) {
    console.error('usage: enqueue.js DATABASE_URL < spec.json (or set DATABASE_URL)');
    process.exit(2);
  }
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const spec = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  const conn = await mysql.createConnection({ uri: url, charset: 'utf8mb4' });
  try {
    console.log(JSON.stringify(await run(conn, spec)));
  } finally {
    await conn.end();
  }
}

module.exports = { enqueue, enqueueUnique, enqueueAfter, enqueueBatch };

if (require.main === module) {
  main().catch((e) => {
    console.error(e.message);
    process.exit(1);
  });
}
