<?php
// Demo kinds for the process handler tests, served by the PHP reference worker.
require __DIR__ . '/../../clients/php/jobq_worker.php';

$worker = new JobqWorker();
$worker->handle('echo', function (JobqJob $job) {
    echo "echo says hello on stdout\n";
    $text = $job->payload['text'] ?? '';
    file_put_contents($job->payload['file'], getmypid() . " $text {$job->attempt} {$job->claim}\n", FILE_APPEND);
});
$worker->handle('fail', function () { throw new RuntimeException('failed on purpose'); });
$worker->handle('later', function () { throw new JobqRetry('rate limited', '1h'); });
$worker->handle('fatal', function () { throw new JobqFatal('bad input, never retry'); });
$worker->handle('snooze', function () { throw new JobqSnooze('10m'); });
$worker->handle('finished', function () { return JobqWorker::FINISHED; });
$worker->handle('reported', function (JobqJob $job) {
    $job->progress(50, 'half way');
    $job->output = ['n' => $job->payload['n'], 'words' => ['ünï', '<b>']];
});
$worker->run();
