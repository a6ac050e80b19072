// A process that ends with uvsched work pending, one way per mode
// (queue.test.js runs each in its own process and checks how it ended).
//   exit-now  process.exit(4) right after scheduling 400 jobs
//   exit-mid  process.exit(3) from the first job's reaction, mid-work
//   end-open  the script ends with the queue open and 400 jobs queued:
//             node waits for them, then its cleanup hook closes the queue
//   idle-open a queue left open with nothing to do: node exits at once
'use strict';
const { Queue } = require(process.env.UVSCHED_ADDON);

const mode = process.argv[2];
const q = new Queue({ width: 4, maxConcurrency: 3 });
let settled = 0;
process.on('exit', () => console.log(`settled ${settled}`));
if (mode !== 'idle-open') {
  for (let i = 0; i < 400; i++) {
    q.spin(i % 8, 500).then(() => {
      settled++;
      if (mode === 'exit-mid' && settled === 1) process.exit(3);
    });
  }
}
if (mode === 'exit-now') process.exit(4);
