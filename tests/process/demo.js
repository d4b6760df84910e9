// Demo kinds for the process handler tests, served by the Node.js reference worker.
'use strict';
const fs = require('fs');
const path = require('path');
const { Worker, Retry, Fatal, Snooze, FINISHED } = require(path.join(__dirname, '..', '..', 'clients', 'node', 'jobq_worker.js'));

const worker = new Worker();
worker.handle('echo', async (job) => {
  console.log('echo says hello on stdout');
  fs.appendFileSync(job.payload.file, `${process.pid} ${job.payload.text || ''} ${job.attempt} ${job.claim}\n`);
});
worker.handle('fail', () => { throw new Error('failed on purpose'); });
worker.handle('later', () => { throw new Retry('rate limited', '1h'); });
worker.handle('fatal', () => { throw new Fatal('bad input, never retry'); });
worker.handle('snooze', () => { throw new Snooze('10m'); });
worker.handle('finished', () => FINISHED);
worker.handle('reported', (job) => {
  job.progress(50, 'half way');
  job.output = { n: job.payload.n, words: ['ünï', '<b>'] };
});
worker.run();
