// node --test suite of examples/node-addon (meson test node-addon; it sets
// UVSCHED_ADDON to the built uvsched.node). Every test is bounded in count
// and time; none sleeps to wait for something: jobs that must stay running
// are held with hold()/release(), and child processes are waited for.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { spawnSync } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');

const addonPath = process.env.UVSCHED_ADDON;
assert.ok(addonPath, 'UVSCHED_ADDON must name the built uvsched.node');
const addon = require(addonPath);
const { Queue } = addon;

// Runs node on a script of this directory, with no core file if it aborts.
function child(script, args, env) {
  const r = spawnSync('/bin/sh',
    ['-c', 'ulimit -c 0; exec "$0" "$@"', process.execPath,
      path.join(__dirname, script), ...args],
    {
      env: { ...process.env, ...env },
      encoding: 'utf8',
      timeout: 60000,
    });
  if (r.error) throw r.error;
  return r;
}

// A job's promise, with its outcome caught at once: a job that is cancelled
// rejects before anything else would have looked at it.
function track(p) {
  return {
    id: p.id,
    outcome: p.then((value) => ({ status: 'fulfilled', value }),
      (reason) => ({ status: 'rejected', reason })),
  };
}

test('the libuv the addon calls is node\'s own', () => {
  assert.equal(addon.versions.uv, process.versions.uv);
  assert.match(addon.versions.uvsched, /^\d+\.\d+\.\d+$/);
});

test('per-key order under load, within maxConcurrency', { timeout: 60000 },
  async () => {
    const keys = 24;
    const perKey = 40;
    const q = new Queue({ width: 4, maxConcurrency: 3 });
    const settled = new Map(); // key -> results in settle order
    const all = [];
    for (let i = 0; i < keys * perKey; i++) {
      const key = (i * 7) % keys;
      const p = i % 3 === 0 ? q.hash(key, 20000) : q.spin(key, 50 + (i % 5) * 50);
      all.push(p.then((r) => {
        if (!settled.has(key)) settled.set(key, []);
        settled.get(key).push(r);
      }));
    }
    await Promise.all(all);
    assert.equal(settled.size, keys);
    for (const [key, rs] of settled) {
      assert.equal(rs.length, perKey, `key ${key}: every job settled`);
      for (let k = 1; k < rs.length; k++) {
        // Settled in submission order (ids grow), and never overlapping:
        // each started after the one before it in the key had ended.
        assert.ok(rs[k].id > rs[k - 1].id, `key ${key}: settle order`);
        assert.ok(rs[k].startNs >= rs[k - 1].endNs, `key ${key}: overlap`);
      }
    }
    const st = q.stats();
    assert.equal(st.ran, keys * perKey);
    assert.equal(st.pending, 0);
    assert.ok(st.maxRunning <= 3, `maxRunning ${st.maxRunning} > cap 3`);
    assert.ok(st.maxRunning >= 2, 'different keys ran in parallel');
    await q.close();
    assert.throws(() => q.spin(1, 1), { code: 'ESHUTDOWN' });
  });

test('hash jobs: the same input gives the same value', async () => {
  const q = new Queue();
  const [a, b, c] = await Promise.all([q.hash(5, 1000), q.hash(5, 1000),
    q.hash(6, 1000)]);
  assert.match(a.value, /^[0-9a-f]{16}$/);
  assert.equal(a.value, b.value);
  assert.notEqual(a.value, c.value);
  await q.close();
});

test('cancel: queued jobs never run, the rest keep their order',
  { timeout: 30000 }, async () => {
    const q = new Queue({ width: 4 });
    const gate = q.hold(7); // key 7 is busy until release()
    const jobs = [];
    for (let i = 0; i < 50; i++) jobs.push(track(q.spin(7, 20)));
    const other = q.spin(8, 20); // another key is not held up
    await other;
    for (let i = 0; i < 50; i += 2) {
      assert.equal(q.cancel(jobs[i].id), true, `cancel job ${i}`);
    }
    assert.equal(q.cancel(jobs[0].id), false, 'a second cancel');
    assert.equal(q.cancel(1e9), false, 'an unknown id');
    q.release();
    await gate;
    const results = await Promise.all(jobs.map((j) => j.outcome));
    let lastId = 0;
    results.forEach((r, i) => {
      if (i % 2 === 0) {
        assert.equal(r.status, 'rejected', `job ${i}`);
        assert.equal(r.reason.code, 'ECANCELED');
      } else {
        assert.equal(r.status, 'fulfilled', `job ${i}`);
        assert.ok(r.value.id > lastId);
        lastId = r.value.id;
      }
    });
    assert.equal(q.cancel(jobs[1].id), false, 'a job already done');
    const st = q.stats();
    assert.equal(st.cancelled, 25);
    assert.equal(st.ran, 27);
    await q.close();
  });

test('close(\'cancel\') hands queued jobs back with ECANCELED',
  { timeout: 30000 }, async () => {
    const q = new Queue({ width: 2 });
    const gate = track(q.hold(1));
    const jobs = [];
    for (let i = 0; i < 20; i++) jobs.push(track(q.spin(1, 10)));
    await q.close('cancel'); // releases the held job, cancels the rest
    const g = await gate.outcome;
    // The held job had started (it ran) or had not (it was cancelled).
    assert.ok(g.status === 'fulfilled' || g.reason.code === 'ECANCELED');
    for (const r of await Promise.all(jobs.map((j) => j.outcome))) {
      assert.equal(r.status, 'rejected');
      assert.equal(r.reason.code, 'ECANCELED');
    }
    assert.throws(() => q.close(), { code: 'EALREADY' });
  });

test('bad arguments throw', async () => {
  assert.throws(() => new Queue({ width: -1 }), RangeError);
  assert.throws(() => new Queue({ width: 2.5 }), RangeError);
  assert.throws(() => new Queue('x'), TypeError);
  const q = new Queue({ width: 1, maxConcurrency: 0 });
  assert.throws(() => q.spin(), TypeError);
  assert.throws(() => q.spin(-1, 1), RangeError);
  assert.throws(() => q.spin(1, 'x'), RangeError);
  assert.throws(() => q.close('later'), TypeError);
  await q.close();
});

test('process exit with work pending', { timeout: 60000 }, () => {
  const cases = [
    // mode, exit code, what it prints
    ['exit-now', 4, /^settled 0$/m],
    ['exit-mid', 3, /^settled 1$/m],
    ['end-open', 0, /^settled 400$/m],
    ['idle-open', 0, /^settled 0$/m],
  ];
  for (const [mode, code, out] of cases) {
    const t0 = process.hrtime.bigint();
    const r = child('child-exit.js', [mode]);
    const ms = Number(process.hrtime.bigint() - t0) / 1e6;
    assert.equal(r.signal, null, `${mode}: killed by ${r.signal}: ${r.stderr}`);
    assert.equal(r.status, code, `${mode}: ${r.stderr}`);
    assert.match(r.stdout, out, mode);
    assert.equal(r.stderr, '', mode);
    console.log(`# ${mode}: exit ${r.status} after ${ms.toFixed(0)} ms`);
  }
});

test('worker threads ended mid-work', { timeout: 60000 }, () => {
  const r = child('child-worker.js', []);
  assert.equal(r.signal, null, `killed by ${r.signal}: ${r.stderr}`);
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stderr, '');
  assert.deepEqual(JSON.parse(r.stdout), {
    'terminate': 1, // what worker.terminate() resolves to
    'exit': 5,
    'end-open': 0,
    'terminate-3': [1, 1, 1],
  });
});

test('without the cleanup hook, a worker that ends aborts the process',
  { timeout: 60000 }, () => {
    // The host rule the addon's async cleanup hook exists for: this child
    // leaves it out (UVSCHED_ADDON_NO_HOOK) and node aborts.
    const r = child('child-worker.js', ['terminate'],
      { UVSCHED_ADDON_NO_HOOK: '1' });
    assert.equal(r.signal, 'SIGABRT', `status ${r.status}: ${r.stderr}`);
    assert.match(r.stderr, /uv_loop_close\(\) while having open handles/);
  });

// fs.readFile beside a flood of 400 jobs of 1.8 ms: with maxConcurrency 3 a
// pool thread stays free for fs; uncapped, fs work waits for a drain to give
// its thread back; with plain napi async work it waits behind the whole
// flood. Speed belongs to benchmarks: this prints the figures and asserts
// only that the cap beats plain async work by far.
function readFileMs(file) {
  const t0 = process.hrtime.bigint();
  return new Promise((resolve, reject) => {
    fs.readFile(file, (err) => {
      if (err) reject(err);
      else resolve(Number(process.hrtime.bigint() - t0) / 1e6);
    });
  });
}

async function latencyBesideFlood(submit) {
  const flood = [];
  for (let i = 0; i < 400; i++) flood.push(submit(i));
  let done = false;
  const all = Promise.all(flood).then(() => {
    done = true;
  });
  const ms = [];
  do {
    ms.push(await readFileMs(__filename));
  } while (!done && ms.length < 400);
  await all;
  const sorted = [...ms].sort((a, b) => a - b);
  return {
    first: ms[0],
    median: sorted[sorted.length >> 1],
    max: sorted[sorted.length - 1],
    reads: ms.length,
  };
}

test('fs.readFile latency beside a flood, with and without the cap',
  { timeout: 60000 }, async () => {
    await readFileMs(__filename); // warm the file and the pool
    const rows = {};
    let q = new Queue({ width: 4, maxConcurrency: 3 });
    rows['uvsched maxConcurrency 3'] =
      await latencyBesideFlood((i) => q.spin(i % 40, 1800));
    await q.close();
    q = new Queue({ width: 4 });
    rows['uvsched no cap'] =
      await latencyBesideFlood((i) => q.spin(i % 40, 1800));
    await q.close();
    rows['napi async work'] = await latencyBesideFlood(() => addon.rawSpin(1800));
    console.log(`# ${require('node:os').cpus().length} CPUs, ${
      process.env.UV_THREADPOOL_SIZE || 4} pool threads, 400 jobs of 1.8 ms`);
    for (const [name, r] of Object.entries(rows)) {
      console.log(`# ${name.padEnd(26)} readFile ms: first ${
        r.first.toFixed(2)} median ${r.median.toFixed(2)} max ${
        r.max.toFixed(2)} (${r.reads} reads during the flood)`);
    }
    const capped = rows['uvsched maxConcurrency 3'].median;
    const raw = rows['napi async work'].first;
    assert.ok(capped < raw / 2,
      `capped median ${capped} ms not below half of async work's ${raw} ms`);
  });
