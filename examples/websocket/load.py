#!/usr/bin/env python3
"""Throughput of examples/websocket in each mode: the figures of
examples/websocket/README.md come from here.

  load.py --server BUILDDIR/examples/websocket/websocket
          [--modes pool,inline] [--work-us 73] [--seconds 5]
          [--connections 64] [--window 16] [--size 64] [--runs 5]
          [--max-concurrency N] [--json FILE]

For each run and mode (alternated: pool, inline, pool, inline, ...): start
a server on a free port of 127.0.0.1 with --work-us, open --connections
WebSocket connections, each keeping --window messages of --size bytes in
flight, count the answers during --seconds after a 1 s warm-up, then stop
the server with SIGINT. Prints one line per run and, per mode, the median
of the runs in messages per second.

The client is written for a small CPU footprint, since it shares the
machine with the server: plain asyncio streams, frames encoded by hand
(masked with a zero key, which the protocol allows), answers checked for
order by their sequence number only (the tests check digests). It needs no
third-party module.

Exit status: 0 only if every answer came in order and every server exited 0
with uv_loop_close() == 0.
"""

import argparse
import asyncio
import json
import os
import re
import signal
import statistics
import struct
import subprocess
import sys
import time

HANDSHAKE = (b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
             b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
             b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
             b"Sec-WebSocket-Version: 13\r\n\r\n")
DIGEST_LEN = 17


def frame(payload):
    n = len(payload)
    if n < 126:
        return struct.pack("!BB", 0x81, 0x80 | n) + b"\0\0\0\0" + payload
    return struct.pack("!BBH", 0x81, 0x80 | 126, n) + b"\0\0\0\0" + payload


class Conn:
    def __init__(self, cid, size):
        self.cid = cid
        self.pad = b"p" * max(0, size - 20)
        self.sent = 0
        self.got = 0
        self.bad = 0

    def next_frame(self):
        f = frame(b"%08d %010d " % (self.cid, self.sent) + self.pad)
        self.sent += 1
        return f


async def drive(port, conn, window, state):
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HANDSHAKE)
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError("handshake: %r" % head[:40])
    writer.write(b"".join(conn.next_frame() for _ in range(window)))
    buf = b""
    while not state["stop"]:
        chunk = await reader.read(1 << 16)
        if not chunk:
            raise RuntimeError("connection %d closed" % conn.cid)
        buf += chunk
        pos = 0
        answers = 0
        while len(buf) - pos >= 2:
            n = buf[pos + 1] & 0x7f
            hl = 2
            if n == 126:
                if len(buf) - pos < 4:
                    break
                n = struct.unpack_from("!H", buf, pos + 2)[0]
                hl = 4
            if len(buf) - pos < hl + n:
                break
            seq = int(buf[pos + hl + DIGEST_LEN + 9:pos + hl + DIGEST_LEN + 19])
            if seq != conn.got:
                conn.bad += 1
            conn.got += 1
            answers += 1
            pos += hl + n
        buf = buf[pos:]
        if answers:
            if state["counting"]:
                state["count"] += answers
            writer.write(b"".join(conn.next_frame() for _ in range(answers)))
    writer.close()


def one_run(args, mode):
    proc = subprocess.Popen(
        [args.server, "--host", "127.0.0.1", "--port", "0", "--mode", mode,
         "--work-us", str(args.work_us), "--max-conns",
         str(args.connections + 16), "--max-concurrency",
         str(args.max_concurrency)],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r"listening on ws://[0-9.]+:(\d+)", line)
    if not m:
        proc.kill()
        raise RuntimeError("server did not start: %r" % line)
    port = int(m.group(1))
    conns = [Conn(c, args.size) for c in range(args.connections)]
    state = {"stop": False, "counting": False, "count": 0}

    async def run():
        tasks = [asyncio.ensure_future(drive(port, c, args.window, state))
                 for c in conns]
        await asyncio.sleep(1.0)  # warm-up: a measured interval, not a sync
        state["counting"] = True
        t0 = time.monotonic()
        await asyncio.sleep(args.seconds)
        state["counting"] = False
        took = time.monotonic() - t0
        state["stop"] = True
        n = state["count"]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return n / took

    try:
        rate = asyncio.run(run())
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    bad = sum(c.bad for c in conns)
    ok = proc.returncode == 0 and "loop_close=ok" in err and bad == 0
    return {"mode": mode, "msg_per_s": rate, "out_of_order": bad,
            "server_rc": proc.returncode, "ok": ok,
            "server_log": err.strip().splitlines()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--server", required=True)
    ap.add_argument("--modes", default="pool,inline")
    ap.add_argument("--work-us", type=int, default=73)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--window", type=int, default=16)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-concurrency", type=int, default=0,
                    help="the server's --max-concurrency (pool mode)")
    ap.add_argument("--json")
    a = ap.parse_args()
    modes = a.modes.split(",")
    runs = []
    for k in range(a.runs):
        for mode in modes:
            r = one_run(a, mode)
            runs.append(r)
            print("run %d %-6s %8.0f msg/s  out_of_order=%d server=%s" %
                  (k + 1, mode, r["msg_per_s"], r["out_of_order"],
                   "ok" if r["ok"] else "FAILED"), flush=True)
    medians = {m: statistics.median(r["msg_per_s"] for r in runs
                                    if r["mode"] == m) for m in modes}
    print("medians of %d alternated runs, %d us of work per message, "
          "%d connections x %d in flight, %d CPUs, UV_THREADPOOL_SIZE=%s, "
          "--max-concurrency %d:" %
          (a.runs, a.work_us, a.connections, a.window, os.cpu_count(),
           os.environ.get("UV_THREADPOOL_SIZE", "4 (default)"),
           a.max_concurrency))
    for m in modes:
        print("  %-6s %8.0f msg/s" % (m, medians[m]))
    if len(modes) == 2:
        print("  %s / %s = %.2f" % (modes[0], modes[1],
                                    medians[modes[0]] / medians[modes[1]]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "runs": runs, "medians": medians},
                      f, indent=1)
    return 0 if all(r["ok"] for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
