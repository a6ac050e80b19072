#!/usr/bin/env python3
"""Tests of examples/backpressure (meson suite 'examples'), one per name:

  order        4 clients each send 2,000 lines at once before reading any
               answer, so that every connection's queue fills and its
               reading stops and starts again many times: each gets its
               lines back upper-cased, all of them, in order; the server
               runs its 4 s and exits 0 with a summary in which the log
               took records and the sampler both ran and dropped samples
  order-keyed  the same on one keyed worker (--keyed)
  conns        256 idle connections fill the server; 16 more are closed by
               the server as they come; once some of the 256 leave, a new
               connection is served
  idle         with IDLE_MS 500: a client that sends nothing is closed; one
               that sends a line every 100 ms for 1.5 s is not, and gets
               every answer
  never-read   a client that sends without ever reading is closed once its
               unread answers pass the server's 64 KiB bound; a client
               beside it is served all along

  test_backpressure.py NAME --server BUILDDIR/examples/backpressure/backpressure

Each test starts its own server on a free port of 127.0.0.1. Every socket
has a timeout and every loop a bound. Exit status: 0 passed, 1 failed.
"""

import argparse
import socket
import subprocess
import sys
import threading
import time

TIMEOUT = 20  # seconds for any one socket operation or wait


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


class Server:
    def __init__(self, binary, seconds, idle_ms=None, keyed=False):
        args = [binary] + (["--keyed"] if keyed else []) + ["0", str(seconds)]
        if idle_ms is not None:
            args.append(str(idle_ms))
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        check(line.startswith("listening on port "), "no port line: %r" % line)
        self.port = int(line.split()[-1])

    def connect(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT)
        s.settimeout(TIMEOUT)
        return s

    def finish(self):
        """Waits for the server's own end; returns (status, stdout)."""
        try:
            out, err = self.proc.communicate(timeout=TIMEOUT + 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise Failure("the server did not exit at its time")
        if err:
            sys.stderr.write(err)
        return self.proc.returncode, out

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.communicate()


def read_lines(sock, count):
    """Reads count lines (bounded by TIMEOUT per recv)."""
    buf = b""
    lines = []
    while len(lines) < count:
        data = sock.recv(65536)
        check(data, "closed after %d of %d lines" % (len(lines), count))
        buf += data
        *done, buf = buf.split(b"\n")
        lines.extend(done)
    return lines


def closed_by_server(sock, within):
    """Does the server close sock within `within` s? Reads what comes."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        sock.settimeout(max(0.05, end - time.monotonic()))
        try:
            if sock.recv(65536) == b"":
                return True
        except socket.timeout:
            return False
        except (ConnectionResetError, BrokenPipeError):
            return True
    return False


def served(server):
    s = server.connect()
    try:
        s.sendall(b"ping\n")
        return read_lines(s, 1) == [b"PING"]
    finally:
        s.close()


def test_order(binary, keyed=False):
    server = Server(binary, 4, keyed=keyed)
    n = 2000
    results = {}

    def client(i):
        s = server.connect()
        lines = [b"client %d line %d" % (i, k) for k in range(n)]
        s.sendall(b"".join(l + b"\n" for l in lines))
        results[i] = read_lines(s, n) == [l.upper() for l in lines]
        s.close()

    threads = [threading.Thread(target=client, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT * 2)
    check(all(results.get(i) for i in range(4)),
          "answers wrong or missing: %r" % results)
    status, out = server.finish()
    check(status == 0, "the server exited %d" % status)
    # "log: N records; samples: R run, D dropped"
    words = out.split()
    check("log:" in words, "no summary: %r" % out)
    logged = int(words[words.index("log:") + 1])
    run = int(words[words.index("samples:") + 1])
    dropped = int(words[words.index("run,") + 1])
    check(logged > 0 and run > 0 and dropped > 0, "summary: %r" % out)


def test_conns(binary):
    # An idle timeout longer than the test: only the cap may close them.
    server = Server(binary, 60, idle_ms=600000)
    try:
        held = [server.connect() for _ in range(256)]
        # One round trip on the last: the server has taken all 256 in.
        held[-1].sendall(b"x\n")
        check(read_lines(held[-1], 1) == [b"X"], "256th not served")
        extra = [server.connect() for _ in range(16)]
        for s in extra:
            check(closed_by_server(s, TIMEOUT),
                  "a connection over the cap was kept")
            s.close()
        for s in held[:8]:
            s.close()
        deadline = time.monotonic() + TIMEOUT
        ok = False
        while not ok and time.monotonic() < deadline:
            try:
                ok = served(server)
            except (Failure, OSError):
                time.sleep(0.05)  # the server has not seen the 8 leave yet
        check(ok, "no newcomer served after 8 connections left")
        for s in held[8:]:
            s.close()
    finally:
        server.kill()


def test_idle(binary):
    server = Server(binary, 60, idle_ms=500)
    try:
        quiet = server.connect()
        talker = server.connect()
        start = time.monotonic()
        for k in range(15):
            talker.sendall(b"tick %d\n" % k)
            check(read_lines(talker, 1) == [b"TICK %d" % k],
                  "talker's answer %d" % k)
            time.sleep(0.1)  # the client's pace, not a synchronisation
        check(time.monotonic() - start >= 1.4, "the talk took under 1.4 s")
        check(closed_by_server(quiet, TIMEOUT), "the quiet client was kept")
        talker.sendall(b"still here\n")
        check(read_lines(talker, 1) == [b"STILL HERE"],
              "the talker was closed")
        quiet.close()
        talker.close()
    finally:
        server.kill()


def test_never_read(binary):
    server = Server(binary, 60, idle_ms=600000)
    try:
        mute = server.connect()
        mute.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        chunk = b"".join(b"%0199d\n" % k for k in range(500))  # 100 KB
        sent = 0
        cut = False
        deadline = time.monotonic() + TIMEOUT * 2
        while time.monotonic() < deadline and sent < 200 * 1024 * 1024:
            try:
                mute.sendall(chunk)
                sent += len(chunk)
            except (ConnectionResetError, BrokenPipeError):
                cut = True
                break
            except socket.timeout:
                break  # the server stopped reading it: see below
        if not cut:
            cut = closed_by_server(mute, TIMEOUT)
        check(cut, "a client that never reads was kept (%d bytes sent)"
              % sent)
        check(served(server), "another client not served")
        mute.close()
    finally:
        server.kill()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("name", choices=["order", "order-keyed", "conns", "idle",
                                    "never-read"])
    p.add_argument("--server", required=True)
    a = p.parse_args()
    tests = {
        "order": lambda: test_order(a.server),
        "order-keyed": lambda: test_order(a.server, keyed=True),
        "conns": lambda: test_conns(a.server),
        "idle": lambda: test_idle(a.server),
        "never-read": lambda: test_never_read(a.server),
    }
    try:
        tests[a.name]()
    except Failure as e:
        print("FAIL %s: %s" % (a.name, e))
        return 1
    print("ok %s" % a.name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
