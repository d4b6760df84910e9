<?php
// A jobq process handler in PHP: protocol v1 (docs/process-protocol.md), standard library only.
//
// Copy this file next to your code, register a function per job kind and call run():
//
//   require __DIR__ . '/jobq_worker.php';
//   $worker = new JobqWorker();
//   $worker->handle('resize', function (JobqJob $job) {
//       make_thumbnail($job->payload['path']);   // returning normally: the job is done
//   });
//   $worker->run();
//
// and in jobq.toml:
//
//   [handlers.resize]
//   process = ["/usr/bin/php", "/srv/app/resize_worker.php"]
//
// A handler that throws fails the attempt with the exception's message (jobq retries it with backoff);
// throw new JobqRetry($msg, 30) to name the delay (seconds, or a string such as "30s"), new
// JobqFatal($msg) to make the job dead at once, new JobqSnooze('5m') to run it again later without
// using an attempt. Return JobqWorker::FINISHED when the handler finished the job itself with
// CALL jobq_finish(id, claim, attempt) in its own committed transaction. While it runs, a handler may
// call $job->progress(37.5, 'rows 375 of 1000') (a percent from 0 to 100, and a message or null) to show
// how far it has got, and set $job->output to any JSON-able value the job leaves on its row when done.
//
// stdout belongs to the protocol: while run() runs, echo and print go to stderr, which jobq logs under
// the job's id.

class JobqRetry extends Exception
{
    public $retryIn;

    public function __construct(string $message, $retryIn = null)
    {
        parent::__construct($message);
        $this->retryIn = $retryIn;
    }
}

class JobqFatal extends Exception
{
}

class JobqSnooze extends Exception
{
    public $delay;

    public function __construct($delay)
    {
        parent::__construct("snooze $delay");
        $this->delay = $delay;
    }
}

final class JobqJob
{
    public $id;
    public $kind;
    public $queue;
    public $attempt;
    public $maxAttempts;
    /** With id and attempt, fences the application's own writes; also what jobq_finish takes. */
    public $claim;
    public $payload;
    public $runAt;
    public $deadline;
    /** The W3C trace context to continue (null without one): the parent of the job's own spans. */
    public $traceparent;
    /** What the job leaves on its row when it is done (any JSON-able value), or null. */
    public $output = null;
    private $send;

    public function __construct(array $r, ?callable $send = null)
    {
        $this->send = $send;
        $this->id = $r['id'];
        $this->kind = $r['kind'];
        $this->queue = $r['queue'] ?? null;
        $this->attempt = $r['attempt'] ?? null;
        $this->maxAttempts = $r['max_attempts'] ?? null;
        $this->claim = $r['claim'] ?? null;
        $this->payload = $r['payload'] ?? null;
        $this->runAt = $r['run_at'] ?? null;
        $this->deadline = $r['deadline'] ?? null;
        $this->traceparent = $r['traceparent'] ?? null;
    }

    /** Reports how far the job has got: a percent from 0 to 100, and a short message or null. */
    public function progress($percent, ?string $message = null): void
    {
        $line = ['id' => $this->id, 'progress' => $percent];
        if ($message !== null) {
            $line['message'] = $message;
        }
        if ($this->send !== null) {
            ($this->send)($line);
        }
    }
}

final class JobqWorker
{
    const PROTOCOL = 1;
    /** Return this from a handler that finished its job itself with jobq_finish. */
    const FINISHED = "\0jobq-finished";

    private $handlers = [];
    private $out;

    public function handle(string $kind, callable $fn): self
    {
        $this->handlers[$kind] = $fn;
        return $this;
    }

    /** Serves jobs until jobq closes stdin. */
    public function run(): void
    {
        $this->out = fopen('php://stdout', 'w');
        // Anything the application prints goes to stderr, not into the protocol.
        ob_start(function ($text) {
            fwrite(STDERR, $text);
            return '';
        }, 1);
        $this->send(['jobq' => self::PROTOCOL, 'ready' => true]);
        while (($line = fgets(STDIN)) !== false) {
            if (trim($line) === '') {
                continue;
            }
            $request = json_decode($line, true, 512, JSON_THROW_ON_ERROR);
            $this->send($this->answer($request));
        }
    }

    private function send(array $message): void
    {
        fwrite($this->out, json_encode($message, JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE) . "\n");
        fflush($this->out);
    }

    private function answer(array $request): array
    {
        $job = new JobqJob($request, function (array $line) {
            $this->send($line);
        });
        $fn = $this->handlers[$job->kind] ?? null;
        if ($fn === null) {
            return ['id' => $job->id, 'ok' => false, 'error' => "no handler for kind {$job->kind}"];
        }
        try {
            $result = $fn($job);
        } catch (JobqSnooze $s) {
            return ['id' => $job->id, 'snooze' => $s->delay];
        } catch (JobqFatal $e) {
            return ['id' => $job->id, 'ok' => false, 'error' => self::message($e), 'fatal' => true];
        } catch (Throwable $e) {
            $answer = ['id' => $job->id, 'ok' => false, 'error' => self::message($e)];
            if ($e instanceof JobqRetry && $e->retryIn !== null) {
                $answer['retry_in'] = $e->retryIn;
            }
            return $answer;
        } finally {
            if (ob_get_level() > 0) {
                ob_flush();
            }
        }
        $answer = ['id' => $job->id, 'ok' => true];
        if ($result === self::FINISHED) {
            $answer['finished'] = true;
        }
        if ($job->output !== null) {
            $answer['output'] = $job->output;
        }
        return $answer;
    }

    private static function message(Throwable $e): string
    {
        $text = trim($e->getMessage());
        return $text === '' ? get_class($e) : $text;
    }
}
