#!/usr/bin/env python3
"""Tests of examples/websocket (meson suite 'examples'), one per name, with a
real WebSocket client (Debian's python3-websockets) on 127.0.0.1 only:

  order         50 connections x 200 messages each, all sent at once (text,
                binary, and some in fragments): every connection gets its
                200 answers, each the right digest of its message, in the
                order it sent them; nothing lost, nothing cancelled
  backpressure  one client pipelines 120 messages of 2 ms into
                --max-queue 4: the server stops reading it (pauses >= 1),
                holds at most 2 refused messages, and answers all 120 in
                order
  vanish        20 clients send 100 messages of 1 ms each and vanish (RST)
                once the first answer comes, while 5 others finish normally:
                the 5 get every answer, every connection's memory is freed
                (its "closed" line), the vanished ones' queued messages
                are cancelled (UV_ECANCELED, never run), and a new client is
                served; at exit nothing is left (live_conns=0 live_msgs=0;
                ASan's leak check in the asan config)
  sigint        20 clients stream messages of 0.5 ms; once each has its
                first answers, SIGINT: the server exits 0 within the bound
                with uv_loop_close() == 0 and nothing left in memory
  limits        a message over --max-msg (whole and in fragments: close
                1009), a connection over --max-conns (close 1013), a client
                that says nothing for --idle-s, a handshake that never ends,
                a client that sends and never reads (the server stops
                reading it, its output stays bounded, and --idle-s closes
                it), plain HTTP (404): each handled, the server goes on

  test_ws.py NAME --server BUILDDIR/examples/websocket/websocket

Each test starts its own server on a free port and stops it with SIGINT; a
server that exits non-zero (its own order, overlap and leak checks, and
uv_loop_close()) fails the test. Every wait has a bound. Exit status: 0
passed, 1 failed, 77 skipped (no python3-websockets).
"""

import argparse
import asyncio
import os
import queue
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

try:
    import websockets
    import websockets.exceptions
except ImportError:  # pragma: no cover
    websockets = None

FNV_OFFSET = 0xcbf29ce484222325
FNV_PRIME = 0x100000001b3
MASK = (1 << 64) - 1
TIMEOUT = 30  # seconds for any one wait
# Sanitizer builds run several times slower: the bounds below are generous.
STOP_BOUND_S = 20


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def fnv1a(data):
    h = FNV_OFFSET
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


def answer_of(payload):
    """What the server must answer to payload (str or bytes)."""
    raw = payload.encode() if isinstance(payload, str) else payload
    head = b"%016x " % fnv1a(raw)
    return (head + raw).decode() if isinstance(payload, str) else head + raw


class Server:
    def __init__(self, binary, *extra):
        self.args = [binary, "--host", "127.0.0.1", "--port", "0"] + \
            [str(a) for a in extra]
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.err = []
        self.lines = queue.Queue()
        self.t_err = threading.Thread(target=lambda: self.err.extend(
            self.proc.stderr), daemon=True)
        self.t_err.start()
        self.t_out = threading.Thread(target=self._read_out, daemon=True)
        self.t_out.start()
        line = self.next_line(TIMEOUT)
        m = re.search(r"listening on ws://([0-9.]+):(\d+)", line or "")
        if not m:
            self.proc.kill()
            raise Failure("server did not start: %r %s" %
                          (line, "".join(self.err)))
        self.port = int(m.group(2))
        self.url = "ws://127.0.0.1:%d/" % self.port
        self.closed = []  # parsed "closed" lines
        self.stopped = False

    def _read_out(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def next_line(self, timeout):
        try:
            return self.lines.get(timeout=timeout)
        except queue.Empty:
            return None

    def wait_closed(self, n, timeout=TIMEOUT):
        """Waits for n more "closed" lines: n connections freed."""
        deadline = time.monotonic() + timeout
        got = []
        while len(got) < n:
            left = deadline - time.monotonic()
            check(left > 0, "only %d of %d connections freed in %d s" %
                  (len(got), n, timeout))
            line = self.next_line(left)
            check(line is not None, "server output ended")
            m = re.match(r"closed conn=(\d+) received=(\d+) answered=(\d+) "
                         r"cancelled=(\d+)", line)
            if m:
                got.append({k: int(v) for k, v in zip(
                    ("conn", "received", "answered", "cancelled"),
                    m.groups())})
        self.closed.extend(got)
        return got

    def stop(self, signalled=False):
        """SIGINT (unless the test sent it already: a second one, once the
        server has closed its signal handles, would kill it), then the exit
        status within STOP_BOUND_S; returns stderr."""
        t0 = time.monotonic()
        if not signalled and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            rc = self.proc.wait(STOP_BOUND_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            self.err.append("(killed: did not stop within %d s)\n" %
                            STOP_BOUND_S)
        took = time.monotonic() - t0
        self.t_err.join(10)
        self.t_out.join(10)
        self.stopped = True
        err = "".join(self.err)
        sys.stdout.write(err)
        check(rc == 0, "server exited %s" % rc)
        check("loop_close=ok" in err, "uv_loop_close() did not return 0")
        return err, took


def figure(err, name):
    m = re.search(r"\b%s=(\d+)" % name, err)
    check(m is not None, "no %s in the server's report" % name)
    return int(m.group(1))


def connect(url, **kw):
    return websockets.connect(url, compression=None, ping_interval=None,
                              open_timeout=TIMEOUT, close_timeout=5,
                              max_size=2 ** 22, **kw)


def message(cid, i):
    """Client cid's message i: text, binary every 7th, longer now and then;
    every 25th goes in fragments (a list)."""
    text = "c%d m%d %s" % (cid, i, "x" * (i % 13))
    if i % 50 == 49:
        text += " " + "y" * 1500
    payload = text.encode() if i % 7 == 3 else text
    if i % 25 == 11:
        n = len(payload) // 3
        return payload, [payload[:n], payload[n:2 * n], payload[2 * n:]]
    return payload, None


async def exchange(url, cid, n, msg=message):
    """Sends n messages at once while reading; checks every answer in
    order."""
    async with connect(url) as ws:
        async def send():
            for i in range(n):
                payload, frags = msg(cid, i)
                await ws.send(frags if frags is not None else payload)

        sender = asyncio.ensure_future(send())
        for i in range(n):
            got = await asyncio.wait_for(ws.recv(), TIMEOUT)
            payload, _ = msg(cid, i)
            check(got == answer_of(payload),
                  "client %d: answer %d is %r, want %r" %
                  (cid, i, got[:60], answer_of(payload)[:60]))
        await sender
    return n


def test_order(binary, conns=50, per=200):
    server = Server(binary, "--work-us", "20", "--max-queue", "16")
    try:
        async def run():
            return await asyncio.gather(*[exchange(server.url, c, per)
                                          for c in range(conns)])
        t0 = time.monotonic()
        done = asyncio.run(run())
        took = time.monotonic() - t0
        check(sum(done) == conns * per, "answers lost")
        freed = server.wait_closed(conns)
        for c in freed:
            check(c["received"] == per and c["answered"] == per and
                  c["cancelled"] == 0, "connection ended as %r" % c)
        print("order: %d connections x %d messages, every answer in order, "
              "in %.2f s" % (conns, per, took))
    finally:
        err, _ = server.stop()
    check(figure(err, "messages") == conns * per, "message count")
    check(figure(err, "answered") == conns * per, "answer count")
    check(figure(err, "cancelled") == 0, "cancelled work")
    return 0


def test_backpressure(binary, n=120):
    server = Server(binary, "--work-us", "2000", "--max-queue", "4")
    try:
        def plain(cid, i):
            return "m%d" % i, None
        t0 = time.monotonic()
        asyncio.run(exchange(server.url, 0, n, plain))
        took = time.monotonic() - t0
        server.wait_closed(1)
        print("backpressure: %d messages of 2 ms through --max-queue 4 in "
              "order, %.2f s" % (n, took))
    finally:
        err, _ = server.stop()
    check(figure(err, "pauses") >= 1, "the server never stopped reading")
    held = figure(err, "held_max")
    check(1 <= held <= 2, "held_max=%d (want 1 or 2)" % held)
    return 0


def rst(ws):
    """Vanishes: no close frame, and RST instead of FIN."""
    sock = ws.transport.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                    struct.pack("ii", 1, 0))
    ws.transport.abort()


def test_vanish(binary, vanishers=20, stayers=5, n=100):
    server = Server(binary, "--work-us", "1000", "--max-queue", "32")
    try:
        async def vanish(cid):
            ws = await connect(server.url)
            for i in range(n):
                await ws.send("v%d m%d" % (cid, i))
            got = await asyncio.wait_for(ws.recv(), TIMEOUT)
            check(got == answer_of("v%d m0" % cid), "first answer %r" % got)
            rst(ws)

        async def run():
            return await asyncio.gather(
                *([vanish(c) for c in range(vanishers)] +
                  [exchange(server.url, 1000 + c, 50)
                   for c in range(stayers)]))
        asyncio.run(run())
        freed = server.wait_closed(vanishers + stayers)
        cancelled = sum(c["cancelled"] for c in freed)
        full = [c for c in freed if c["received"] == 50 and
                c["answered"] == 50]
        check(len(full) >= stayers, "the staying clients were not served")
        check(cancelled > 0, "no queued message was cancelled")
        # And the server goes on.
        asyncio.run(exchange(server.url, 7, 20))
        server.wait_closed(1)
        print("vanish: %d clients vanished mid-stream, %d of their "
              "messages cancelled unrun, %d others served in full" %
              (vanishers, cancelled, stayers))
    finally:
        err, _ = server.stop()
    check(figure(err, "live_conns") == 0, "connections left")
    check(figure(err, "live_msgs") == 0, "messages left")
    return 0


def test_sigint(binary, conns=20):
    server = Server(binary, "--work-us", "500", "--max-queue", "32")
    started = 0
    took = None
    signalled = []
    try:
        async def stream(cid, ready):
            ws = await connect(server.url)
            try:
                for i in range(500):
                    await ws.send("s%d m%d" % (cid, i))
                    if i == 8:
                        for k in range(3):  # answers flow
                            got = await asyncio.wait_for(ws.recv(), TIMEOUT)
                            check(got == answer_of("s%d m%d" % (cid, k)),
                                  "answer %r" % got)
                        ready.release()
                # Read until the server goes away.
                while True:
                    await asyncio.wait_for(ws.recv(), TIMEOUT)
            except websockets.exceptions.ConnectionClosed:
                return 1
            return 0

        async def run():
            ready = asyncio.Semaphore(0)
            tasks = [asyncio.ensure_future(stream(c, ready))
                     for c in range(conns)]
            for _ in range(conns):
                await asyncio.wait_for(ready.acquire(), TIMEOUT)
            nonlocal took, started
            started = conns
            t0 = time.monotonic()
            server.proc.send_signal(signal.SIGINT)
            signalled.append(1)
            ended = await asyncio.wait_for(asyncio.gather(*tasks),
                                           STOP_BOUND_S)
            took = time.monotonic() - t0
            return sum(ended)
        ended = asyncio.run(run())
        check(ended == conns, "%d of %d clients saw the close" %
              (ended, conns))
    finally:
        err, _ = server.stop(signalled=bool(signalled))
    check(figure(err, "accepted") == conns, "accepted count")
    print("sigint: %d streaming clients, SIGINT: every connection closed in "
          "%.2f s, exit 0, uv_loop_close() == 0, cancelled=%d" %
          (started, took or -1, figure(err, "cancelled")))
    return 0


def raw_handshake(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    s.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n"
              b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
              b"Sec-WebSocket-Version: 13\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(4096)
        check(chunk, "handshake: EOF")
        head += chunk
    check(head.startswith(b"HTTP/1.1 101"), "handshake answered %r" % head)
    return s


def frame(payload):
    """A masked text frame (mask key 0: the payload goes as it is)."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x81, 0x80 | n)
    else:
        head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
    return head + b"\0\0\0\0" + payload


def expect_close(coro_fn, code):
    async def run():
        try:
            await coro_fn()
        except websockets.exceptions.ConnectionClosed as e:
            return e.rcvd.code if e.rcvd is not None else None
        return "open"
    got = asyncio.run(run())
    check(got == code, "expected close %s, got %s" % (code, got))


def test_limits(binary):
    idle_s = 1
    server = Server(binary, "--max-conns", "4", "--max-msg", "1024",
                    "--idle-s", idle_s, "--max-outq", "16384",
                    "--max-queue", "8", "--work-us", "200")
    try:
        url = server.url

        async def too_big():
            async with connect(url) as ws:
                await ws.send("z" * 2000)
                await asyncio.wait_for(ws.recv(), TIMEOUT)
        expect_close(too_big, 1009)

        async def too_big_frags():
            async with connect(url) as ws:
                await ws.send(["z" * 600, "z" * 600])
                await asyncio.wait_for(ws.recv(), TIMEOUT)
        expect_close(too_big_frags, 1009)
        server.wait_closed(2)

        async def full():
            held = [await connect(url) for _ in range(4)]
            try:
                async with connect(url) as extra:
                    await asyncio.wait_for(extra.recv(), TIMEOUT)
            finally:
                for ws in held:  # they still talk
                    await ws.send("still here")
                    got = await asyncio.wait_for(ws.recv(), TIMEOUT)
                    check(got == answer_of("still here"), "got %r" % got)
                    await ws.close()
        expect_close(full, 1013)
        server.wait_closed(4)

        async def quiet():
            async with connect(url) as ws:
                t0 = time.monotonic()
                try:
                    await asyncio.wait_for(ws.recv(), idle_s + 5)
                except websockets.exceptions.ConnectionClosed:
                    return time.monotonic() - t0
                return None
        took = asyncio.run(quiet())
        check(took is not None and took < idle_s + 4,
              "an idle client was not closed (%s)" % took)
        server.wait_closed(1)

        # A handshake that never ends is closed too.
        s = socket.create_connection(("127.0.0.1", server.port),
                                     timeout=TIMEOUT)
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        t0 = time.monotonic()
        check(s.recv(4096) == b"", "a half handshake got an answer")
        half = time.monotonic() - t0
        s.close()
        check(half < idle_s + 4, "a half handshake held %.1f s" % half)

        # A client that sends and never reads: once the server stops
        # reading it, its sends block; then --idle-s closes it.
        s = raw_handshake(server.port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(0.5)
        data = frame(b"w" * 1000)
        sent = 0
        stuck = False
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                s.sendall(data)
                sent += 1
            except socket.timeout:
                stuck = True
                break
        check(stuck, "the server never stopped reading a non-reader")
        server.wait_closed(1)
        s.close()

        # Plain HTTP is not a WebSocket: 404, and the server goes on.
        h = socket.create_connection(("127.0.0.1", server.port),
                                     timeout=TIMEOUT)
        h.sendall(b"GET /x HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        check(h.recv(4096).startswith(b"HTTP/1.1 404"), "plain HTTP")
        h.close()
        asyncio.run(exchange(url, 9, 10))
        server.wait_closed(1)
        print("limits: message cap (1009, whole and in fragments), "
              "connection cap (1013), idle close in %.1f s, half handshake "
              "closed in %.1f s, a non-reader stopped after %d messages and "
              "closed, plain HTTP 404" % (took, half, sent))
    finally:
        err, _ = server.stop()
    out_max = figure(err, "out_bytes_max")
    # --max-outq, plus the answers of what was in hand when it stopped
    # reading: two kept, eight queued, and a drain's batch (at most the eight
    # it took out), running or run with its done_cb not yet on the loop.
    bound = 16384 + (2 + 8 + 8) * (1000 + 17)
    check(out_max <= bound, "output queue reached %d bytes (bound %d)" %
          (out_max, bound))
    check(figure(err, "too_big") == 2, "too_big count")
    check(figure(err, "refused") == 1, "refused count")
    return 0


TESTS = {"order": test_order, "backpressure": test_backpressure,
         "vanish": test_vanish, "sigint": test_sigint, "limits": test_limits}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=sorted(TESTS))
    ap.add_argument("--server", required=True)
    a = ap.parse_args()
    if websockets is None:
        print("SKIP: python3-websockets is not installed for %s" %
              sys.executable)
        return 77
    if not os.access(a.server, os.X_OK):
        print("FAIL: no server binary %s" % a.server)
        return 1
    try:
        return TESTS[a.name](a.server)
    except (Failure, OSError, asyncio.TimeoutError) as e:
        print("FAIL: %s: %r" % (type(e).__name__, e))
        return 1


if __name__ == "__main__":
    sys.exit(main())
