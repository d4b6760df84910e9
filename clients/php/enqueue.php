<?php
// Enqueueing jobq jobs from PHP with PDO MySQL, inside the application's own transaction.
//
// The functions take the application's PDO connection and write the rows `jobq enqueue` writes;
// the caller commits them together with its own writes (or rolls everything back).
// docs/clients.md explains each one; tests/it/clients.rs checks that they write the same rows as
// `jobq enqueue`.
//
// Run as a script, it enqueues the steps of a JSON document read from stdin (see docs/clients.md)
// in one transaction, next to a row of the application's `orders` table (which it expects to
// exist), and prints their ids as JSON:
//
//   echo '{"steps": [{"kind": "mail.welcome", "payload": {"order": 7}}]}' |
//       php enqueue.php mysql://app:secret@127.0.0.1:3306/app

declare(strict_types=1);

const ER_DUP_ENTRY = 1062;

// The columns every insert names. A job that does not set an option gets the value the table's
// DEFAULT would give it, so the row is the same as if the column had been left out.
const INSERT_JOBS = 'INSERT INTO job_queue'
    . ' (kind, payload, queue, priority, run_at, max_attempts, timeout_secs, unique_key, state)'
    . ' VALUES ';
// run_at is the server's NOW(6) plus the delay: the application's clock and time zone do not matter.
const ROW = '(?, ?, ?, ?, NOW(6) + INTERVAL ? SECOND, ?, ?, ?, ?)';

/** The values of one job's row, in the order of INSERT_JOBS. */
function job_row(string $kind, $payload, array $options = []): array
{
    $o = $options + ['queue' => 'default', 'priority' => 0, 'delay_secs' => 0, 'max_attempts' => null,
        'timeout_secs' => null, 'unique_key' => null, 'state' => 'queued'];
    // No payload, or an empty PHP array (which json_encode writes as []), is the empty object {}.
    $payload = ($payload === null || $payload === []) ? new stdClass() : $payload;
    $json = json_encode($payload, JSON_THROW_ON_ERROR | JSON_UNESCAPED_UNICODE);
    return [$kind, $json, $o['queue'], $o['priority'], $o['delay_secs'], $o['max_attempts'],
        $o['timeout_secs'], $o['unique_key'], $o['state']];
}

// region enqueue
/** Inserts one job and returns its id. Options: queue, priority, delay_secs, max_attempts,
 *  timeout_secs, unique_key (but see enqueue_unique). */
function enqueue(PDO $db, string $kind, $payload = null, array $options = []): int
{
    $db->prepare(INSERT_JOBS . ROW)->execute(job_row($kind, $payload, $options));
    return (int) $db->lastInsertId(); // LAST_INSERT_ID()
}

/** Inserts a job holding $uniqueKey, unless a live job of the kind holds it (queued, retry or
 *  running). Returns [id, existing]: the new job's id, or the holder's. */
function enqueue_unique(PDO $db, string $kind, $payload, string $uniqueKey, array $options = []): array
{
    if (strlen($uniqueKey) < 1 || strlen($uniqueKey) > 255) {
        throw new InvalidArgumentException('a unique key is 1 to 255 bytes');
    }
    // A locking read sees the latest committed rows, not this transaction's snapshot.
    $holder = $db->prepare(
        'SELECT id FROM job_queue WHERE unique_live = ? AND kind = ? LOCK IN SHARE MODE');
    for ($round = 0; $round < 3; $round++) {
        $holder->execute([$uniqueKey, $kind]);
        $id = $holder->fetchColumn();
        $holder->closeCursor();
        if ($id !== false) {
            return [(int) $id, true];
        }
        try {
            return [enqueue($db, $kind, $payload, ['unique_key' => $uniqueKey] + $options), false];
        } catch (PDOException $e) {
            if (($e->errorInfo[1] ?? null) !== ER_DUP_ENTRY) {
                throw $e;
            }
            // Another transaction inserted the key since the look-up: look again. The refused
            // insert is undone by itself; the transaction goes on.
        }
    }
    throw new RuntimeException("unique key \"$uniqueKey\" changed hands three times; try again");
}

/** Inserts a job that waits for the jobs of $afterIds: until each is done (it is cancelled if one
 *  ends dead or cancelled), or with $until 'ended' until each has ended in any way (a batch's
 *  callback: its payload, an object, gains the outcome counts). Returns its id. */
function enqueue_after(PDO $db, string $kind, $payload, array $afterIds, string $until = 'done',
    array $options = []): int
{
    $afterIds = array_values(array_unique(array_map('intval', $afterIds)));
    sort($afterIds);
    $marks = implode(', ', array_fill(0, count($afterIds), '?'));
    // Lock the jobs it waits for (their finish must see the new dependent) and check they exist.
    $found = $db->prepare("SELECT id FROM job_queue WHERE id IN ($marks) FOR UPDATE");
    $found->execute($afterIds);
    $missing = array_diff($afterIds, array_map('intval', $found->fetchAll(PDO::FETCH_COLUMN)));
    if ($missing) {
        throw new InvalidArgumentException('jobs ' . implode(', ', $missing) . ' do not exist');
    }
    // Their finish then queues (or cancels) the waiting job in the same transaction.
    $db->prepare("UPDATE job_queue SET has_dependents = 1 WHERE id IN ($marks)")->execute($afterIds);
    $id = enqueue($db, $kind, $payload, ['state' => 'waiting'] + $options);
    $edges = implode(', ', array_fill(0, count($afterIds), '(?, ?, ?)'));
    $values = [];
    foreach ($afterIds as $afterId) {
        array_push($values, $id, $afterId, $until);
    }
    $db->prepare("INSERT INTO jobq_job_deps (job_id, after_id, until) VALUES $edges")->execute($values);
    return $id;
}

/** Inserts many jobs with one multi-row INSERT; $jobs are arrays with kind, payload and options.
 *  Returns their ids, in order. */
function enqueue_batch(PDO $db, array $jobs): array
{
    $values = [];
    foreach ($jobs as $job) {
        array_push($values, ...job_row($job['kind'], $job['payload'] ?? null, $job));
    }
    $db->prepare(INSERT_JOBS . implode(', ', array_fill(0, count($jobs), ROW)))->execute($values);
    // LAST_INSERT_ID() is the first row's; the others follow at the server's step (1, or the
    // cluster's size on Galera).
    [$first, $step] = $db->query('SELECT LAST_INSERT_ID(), @@auto_increment_increment')
        ->fetch(PDO::FETCH_NUM);
    return array_map(fn ($i) => (int) $first + $i * (int) $step, array_keys($jobs));
}
// endregion enqueue

// region example
/** An order and its jobs, committed together. Returns the order's id. */
function example(PDO $db, string $customer): int
{
    $db->beginTransaction();
    try {
        $db->prepare('INSERT INTO orders (customer) VALUES (?)')->execute([$customer]);
        $orderId = (int) $db->lastInsertId();
        $mail = enqueue($db, 'mail.order', ['order' => $orderId], ['queue' => 'mail', 'priority' => -5]);
        [$sync] = enqueue_unique($db, 'sync.customer', ['customer' => $customer], "customer:$customer");
        $photos = enqueue_batch($db, array_map(
            fn ($n) => ['kind' => 'photo.resize', 'payload' => ['n' => $n]], [0, 1, 2]));
        enqueue_after($db, 'order.report', ['order' => $orderId], $photos, 'ended');
        enqueue_after($db, 'order.ship', ['order' => $orderId], [$mail, $sync]);
        $db->commit();
        return $orderId;
    } catch (Throwable $e) {
        $db->rollBack();
        throw $e;
    }
}
// endregion example

/** A connection from a mysql://user:password@host:port/database URL. */
function connect(string $url): PDO
{
    $u = parse_url($url);
    $dsn = sprintf('mysql:host=%s;port=%d;dbname=%s;charset=utf8mb4', $u['host'] ?? '127.0.0.1',
        $u['port'] ?? 3306, ltrim($u['path'] ?? '', '/'));
    return new PDO($dsn, rawurldecode($u['user'] ?? ''), rawurldecode($u['pass'] ?? ''), [
        PDO::ATTR_ERRMODE => PDO::ERRMODE_EXCEPTION,
        // Server-side prepared statements: values travel apart from the SQL, typed.
        PDO::ATTR_EMULATE_PREPARES => false,
    ]);
}

/** Runs example() when $spec names a customer ({"example": "ada"}); else enqueues $spec's steps in
 *  one transaction with an orders row (rolled back when $spec says "rollback": true). Returns
 *  {"order": id} for the example, else one result per step: {"id", "existing"} for a job, {"ids",
 *  "callback"} for a batch. */
function run(PDO $db, array $spec): array
{
    if (array_key_exists('example', $spec)) {
        return ['order' => example($db, $spec['example'])];
    }
    $results = [];
    $db->beginTransaction();
    $db->prepare('INSERT INTO orders (customer) VALUES (?)')->execute(['steps']);
    foreach ($spec['steps'] as $step) {
        if (isset($step['batch'])) {
            $ids = enqueue_batch($db, $step['batch']);
            $callback = null;
            if (isset($step['callback'])) {
                $c = $step['callback'];
                $callback = enqueue_after($db, $c['kind'], $c['payload'] ?? null, $ids, 'ended', $c);
            }
            $results[] = ['ids' => $ids, 'callback' => $callback];
            continue;
        }
        $after = array_map(fn ($i) => $results[$i]['id'], $step['after'] ?? []);
        $payload = $step['payload'] ?? null;
        if (isset($step['unique_key'])) {
            [$id, $existing] = enqueue_unique($db, $step['kind'], $payload, $step['unique_key'], $step);
        } elseif ($after) {
            [$id, $existing] = [enqueue_after($db, $step['kind'], $payload, $after, 'done', $step), false];
        } else {
            [$id, $existing] = [enqueue($db, $step['kind'], $payload, $step), false];
        }
        $results[] = ['id' => $id, 'existing' => $existing];
    }
    if ($spec['rollback'] ?? false) {
        $db->rollBack();
    } else {
        $db->commit();
    }
    return $results;
}

if (realpath($_SERVER['SCRIPT_FILENAME'] ?? '') === __FILE__) {
    $url = $argv[1] ?? getenv('DATABASE_URL');
    if (!$url) {
        fwrite(STDERR, "usage: enqueue.php DATABASE_URL < spec.json (or set DATABASE_URL)\n");
        exit(2);
    }
    $spec = json_decode(stream_get_contents(STDIN), true, 512, JSON_THROW_ON_ERROR);
    echo json_encode(run(connect($url), $spec), JSON_THROW_ON_ERROR), "\n";
}
