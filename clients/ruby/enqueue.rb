#!/usr/bin/ruby
# frozen_string_literal: true

# Enqueueing jobq jobs from Ruby with mysql2, inside the application's own transaction.
#
# The functions take the application's Mysql2::Client and write the rows `jobq enqueue` writes;
# the caller commits them together with its own writes (or rolls everything back). docs/clients.md
# explains each one; tests/it/clients.rs checks that they write the same rows as `jobq enqueue`.
#
# Run as a script, it enqueues the steps of a JSON document read from stdin (see docs/clients.md)
# in one transaction, next to a row of the application's `orders` table (which it expects to
# exist), and prints their ids as JSON:
#
#   echo '{"steps": [{"kind": "mail.welcome", "payload": {"order": 7}}]}' |
#       ruby enqueue.rb mysql://app:secret@127.0.0.1:3306/app

require 'json'
require 'mysql2'
require 'uri'

ER_DUP_ENTRY = 1062

# The columns every insert names. A job that does not set an option gets the value the table's
# DEFAULT would give it, so the row is the same as if the column had been left out.
INSERT_JOBS = 'INSERT INTO job_queue' \
              ' (kind, payload, queue, priority, run_at, max_attempts, timeout_secs, unique_key, state)' \
              ' VALUES '
# run_at is the server's NOW(6) plus the delay: the application's clock and time zone do not matter.
ROW = '(?, ?, ?, ?, NOW(6) + INTERVAL ? SECOND, ?, ?, ?, ?)'

# The values of one job's row, in the order of INSERT_JOBS.
def job_row(kind, payload, queue: 'default', priority: 0, delay_secs: 0, max_attempts: nil,
            timeout_secs: nil, unique_key: nil, state: 'queued')
  [kind, JSON.generate(payload || {}), queue, priority, delay_secs, max_attempts, timeout_secs,
   unique_key, state]
end

# Runs sql as a prepared statement and closes it. Returns its rows (nil for a statement without)
# and its LAST_INSERT_ID().
def execute(db, sql, *params)
  statement = db.prepare(sql)
  rows = statement.execute(*params)&.to_a
  [rows, statement.last_id]
ensure
  statement&.close
end

# region enqueue
# Inserts one job and returns its id. Options: queue, priority, delay_secs, max_attempts,
# timeout_secs, unique_key (but see enqueue_unique).
def enqueue(db, kind, payload = nil, **options)
  _, id = execute(db, INSERT_JOBS + ROW, *job_row(kind, payload, **options))
  id
end

# Inserts a job holding unique_key, unless a live job of the kind holds it (queued, retry or
# running). Returns [id, existing]: the new job's id, or the holder's.
def enqueue_unique(db, kind, payload, unique_key, **options)
  raise ArgumentError, 'a unique key is 1 to 255 bytes' unless (1..255).cover?(unique_key.bytesize)

  3.times do
    # A locking read sees the latest committed rows, not this transaction's snapshot.
    rows, = execute(db, 'SELECT id FROM job_queue WHERE unique_live = ? AND kind = ? LOCK IN SHARE MODE',
                    unique_key, kind)
    return [rows.first['id'], true] if rows.any?

    begin
      return [enqueue(db, kind, payload, unique_key: unique_key, **options), false]
    rescue Mysql2::Error => e
      raise unless e.error_number == ER_DUP_ENTRY
      # Another transaction inserted the key since the look-up: look again. The refused insert is
      # undone by itself; the transaction goes on.
    end
  end
  raise "unique key #{unique_key.inspect} changed hands three times; try again"
end

# Inserts a job that waits for the jobs of after_ids: until each is done (it is cancelled if one
# ends dead or cancelled), or with wait_until: 'ended' until each has ended in any way (a batch's
# callback: its payload, an object, gains the outcome counts). Returns its id.
def enqueue_after(db, kind, payload, after_ids, wait_until: 'done', **options)
  after_ids = after_ids.uniq.sort
  marks = (['?'] * after_ids.size).join(', ')
  # Lock the jobs it waits for (their finish must see the new dependent) and check they exist.
  found, = execute(db, "SELECT id FROM job_queue WHERE id IN (#{marks}) FOR UPDATE", *after_ids)
  missing = after_ids - found.map { |row| row['id'] }
  raise ArgumentError, "jobs #{missing.join(', ')} do not exist" unless missing.empty?

  # Their finish then queues (or cancels) the waiting job in the same transaction.
  execute(db, "UPDATE job_queue SET has_dependents = 1 WHERE id IN (#{marks})", *after_ids)
  id = enqueue(db, kind, payload, **options, state: 'waiting')
  edges = (['(?, ?, ?)'] * after_ids.size).join(', ')
  execute(db, "INSERT INTO jobq_job_deps (job_id, after_id, until) VALUES #{edges}",
          *after_ids.flat_map { |after_id| [id, after_id, wait_until] })
  id
end

# Inserts many jobs with one multi-row INSERT; jobs are hashes of kind:, payload: and options.
# Returns their ids, in order.
def enqueue_batch(db, jobs)
  values = jobs.flat_map { |job| job_row(job[:kind], job[:payload], **job.except(:kind, :payload)) }
  execute(db, INSERT_JOBS + ([ROW] * jobs.size).join(', '), *values)
  # LAST_INSERT_ID() is the first row's; the others follow at the server's step (1, or the
  # cluster's size on Galera).
  first, step = db.query('SELECT LAST_INSERT_ID(), @@auto_increment_increment', as: :array).first
  Array.new(jobs.size) { |i| first + i * step }
end
# endregion enqueue

# region example
# An order and its jobs, committed together. Returns the order's id.
def example(db, customer)
  db.query('START TRANSACTION')
  _, order_id = execute(db, 'INSERT INTO orders (customer) VALUES (?)', customer)
  mail = enqueue(db, 'mail.order', { order: order_id }, queue: 'mail', priority: -5)
  sync, = enqueue_unique(db, 'sync.customer', { customer: customer }, "customer:#{customer}")
  photos = enqueue_batch(db, (0..2).map { |n| { kind: 'photo.resize', payload: { n: n } } })
  enqueue_after(db, 'order.report', { order: order_id }, photos, wait_until: 'ended')
  enqueue_after(db, 'order.ship', { order: order_id }, [mail, sync])
  db.query('COMMIT')
  order_id
rescue StandardError
  db.query('ROLLBACK')
  raise
end
# endregion example

# A connection from a mysql://user:password@host:port/database URL.
def connect(url)
  u = URI.parse(url)
  Mysql2::Client.new(host: u.host || '127.0.0.1', port: u.port || 3306,
                     username: URI.decode_www_form_component(u.user || ''),
                     password: URI.decode_www_form_component(u.password || ''),
                     database: u.path.delete_prefix('/'), encoding: 'utf8mb4')
end

# Runs example() when spec names a customer ({"example": "ada"}); else enqueues spec's steps in one
# transaction with an orders row (rolled back when spec says "rollback": true). Returns
# {"order": id} for the example, else one result per step: {"id", "existing"} for a job,
# {"ids", "callback"} for a batch.
def run(db, spec)
  return { order: example(db, spec[:example]) } if spec.key?(:example)

  results = []
  db.query('START TRANSACTION')
  execute(db, 'INSERT INTO orders (customer) VALUES (?)', 'steps')
  spec[:steps].each do |step|
    if step.key?(:batch)
      ids = enqueue_batch(db, step[:batch])
      callback = if (c = step[:callback])
                   enqueue_after(db, c[:kind], c[:payload], ids, wait_until: 'ended',
                                 **c.except(:kind, :payload))
                 end
      results << { ids: ids, callback: callback }
      next
    end
    kind, payload, after, unique_key = step.values_at(:kind, :payload, :after, :unique_key)
    options = step.except(:kind, :payload, :after, :unique_key)
    after_ids = (after || []).map { |i| results[i][:id] }
    id, existing =
      if unique_key
        enqueue_unique(db, kind, payload, unique_key, **options)
      elsif after_ids.any?
        [enqueue_after(db, kind, payload, after_ids, **options), false]
      else
        [enqueue(db, kind, payload, **options), false]
      end
    results << { id: id, existing: existing }
  end
  db.query(spec[:rollback] ? 'ROLLBACK' : 'COMMIT')
  results
end

if $PROGRAM_NAME == __FILE__
  url = ARGV[0] || ENV.fetch('DATABASE_URL', nil)
  abort 'usage: enqueue.rb DATABASE_URL < spec.json (or set DATABASE_URL)' unless url
  db = connect(url)
  begin
    puts JSON.generate(run(db, JSON.parse($stdin.read, symbolize_names: true)))
  ensure
    db.close
  end
end
