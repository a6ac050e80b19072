// Worker threads with uvsched queues that end every way a worker can;
// queue.test.js runs this in its own process, since a host-rule violation
// aborts the whole process. Prints one JSON line: how each worker ended.
//   terminate  worker.terminate() once the worker's jobs are running
//   exit       process.exit() inside the worker, from a job's reaction
//   end-open   the worker's script ends with its queue open and jobs
//              queued: the worker ends once they are done
'use strict';
const { Worker, isMainThread, parentPort, workerData } =
  require('node:worker_threads');
const { Queue } = require(process.env.UVSCHED_ADDON);

if (!isMainThread) {
  const q = new Queue({ width: 4, maxConcurrency: 2 });
  let settled = 0;
  for (let i = 0; i < 200; i++) {
    q.spin(i % 8, 1000).then(() => {
      if (++settled === 1) parentPort.postMessage('running');
      if (workerData === 'exit' && settled === 3) process.exit(5);
    });
  }
  if (workerData === 'end-open') {
    // A second, idle queue that nothing closes either.
    new Queue();
  }
  return;
}

async function run(how) {
  const w = new Worker(__filename, { workerData: how });
  const exited = new Promise((resolve) => w.once('exit', resolve));
  await new Promise((resolve, reject) => {
    w.once('message', resolve);
    w.once('error', reject);
  });
  if (how === 'terminate') await w.terminate();
  return exited;
}

(async () => {
  const rounds = (process.argv[2] || 'terminate,exit,end-open').split(',');
  const codes = {};
  for (const how of rounds) codes[how] = await run(how);
  // Three at once, ended mid-work together.
  const many = await Promise.all([1, 2, 3].map(() => run('terminate')));
  codes['terminate-3'] = many;
  console.log(JSON.stringify(codes));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
