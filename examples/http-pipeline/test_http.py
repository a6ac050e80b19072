#!/usr/bin/env python3
"""Tests of examples/http-pipeline, one per name (meson suite 'examples'):

  curl            curl requests: /health, /work (with the digest checked
                  against hashlib), /stats, 404, 400, 405, 413, several URLs
                  on one kept-alive connection
  pipeline-order  bursts of pipelined requests on one socket, and on several
                  sockets at once, in each mode: every answer comes back in
                  request order with the right digest, with light and heavy
                  requests (--heavy-rounds) mixed so that connections switch
                  between their two workers (switch_waits > 0, misrouted
                  0); and a server with an answer held back on purpose
                  (HTTP_PIPELINE_FAULT=reorder) exits 1
  disconnect      clients that vanish mid-pipeline: their queued work is
                  cancelled, the server stays up, nothing leaks
  errors          400, 414, 431 and 413 close the connection after the
                  answers owed before them; 404 and 405 keep it; Connection: close and
                  HTTP/1.0 are honoured
  wrk             wrk with pipeline.lua (depth 16) in pool and loop mode for
                  a few seconds: zero errors, zero out of order
  h2load          an independent client: nghttp2's h2load --h1 -m 16
                  (pipelining 16 deep) on 8 connections, 4000 /work and
                  4000 /health requests in pool and loop mode: every one
                  succeeded with a 2xx, none failed, errored or timed out

  test_http.py NAME --server BUILDDIR/examples/http-pipeline/http-pipeline

Each test starts its own servers on free ports of 127.0.0.1 and stops them
with SIGTERM; a server that exits non-zero (its order, overlap or leak
checks, or a sanitizer) fails the test. Exit status: 0 passed, 1 failed,
77 skipped (curl, wrk or h2load missing).
"""

import argparse
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from harness import Server, request, work_body  # noqa: E402

SKIP = 77


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def stop_ok(server):
    rc = server.stop()
    sys.stdout.write(server.stderr)
    check(rc == 0, "server %s exited %s" % (" ".join(server.args[1:]), rc))


# ---------------------------------------------------------------- curl

def curl(*args):
    p = subprocess.run(["curl", "-sS", "--max-time", "30"] + list(args),
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=60)
    # Decoded by hand: text=True would turn the CRLFs of -i into LFs.
    p.stdout = p.stdout.decode("latin-1")
    p.stderr = p.stderr.decode("latin-1", "replace")
    return p


def curl_status(url, *args):
    p = curl("-o", "/dev/null", "-w", "%{http_code}", *args, url)
    return int(p.stdout or "0")


def test_curl(binary):
    if shutil.which("curl") is None:
        print("curl is not installed")
        return SKIP
    server = Server(binary, "pool", threads=2)
    try:
        u = server.url
        p = curl(u + "/health")
        check(p.returncode == 0 and p.stdout == "ok\n",
              "/health: %r %r" % (p.stdout, p.stderr))
        p = curl("-i", u + "/work?n=1000&id=curl-1")
        check(p.returncode == 0, "/work: %s" % p.stderr)
        head, _, body = p.stdout.partition("\r\n\r\n")
        check(head.startswith("HTTP/1.1 200"), "/work status: %r" % head)
        check(body == work_body("curl-1", 1000), "/work body: %r" % body)
        check("id=curl-1" in body, "the body carries the id")

        p = curl(u + "/stats")
        check(p.returncode == 0 and '"mode":"pool"' in p.stdout,
              "/stats: %r" % p.stdout)

        check(curl_status(u + "/nope") == 404, "unknown path: 404")
        check(curl_status(u + "/work?n=x&id=a") == 400, "bad n: 400")
        check(curl_status(u + "/work?n=5") == 400, "no id: 400")
        check(curl_status(u + "/work?n=5&id=a%20b") == 400, "bad id: 400")
        check(curl_status(u + "/work?n=99999999&id=a") == 400, "n too big")
        check(curl_status(u + "/health", "-X", "DELETE") == 405, "405")
        check(curl_status(u + "/health", "-H", "X-Big: " + "x" * 9000) ==
              431, "a header block over the limit: 431")
        check(curl_status(u + "/health?" + "q" * 3000) == 414,
              "a request target over the limit: 414")
        check(curl_status(u + "/health", "--data-binary", "x" * 10000,
                          "-X", "GET") == 413,
              "a body over the limit: 413")

        # Several URLs in one curl: one kept-alive connection, in order.
        urls = [u + "/work?n=%d&id=seq-%d" % (50 * i, i) for i in range(8)]
        p = curl("-v", *urls)
        check(p.returncode == 0, "keep-alive: %s" % p.stderr)
        check(p.stdout == "".join(work_body("seq-%d" % i, 50 * i)
                                  for i in range(8)),
              "keep-alive bodies: %r" % p.stdout)
        check(p.stderr.count("Re-using existing connection") +
              p.stderr.count("Reusing existing") >= 7,
              "curl reused the connection")
    finally:
        stop_ok(server)
    return 0


# ------------------------------------------------------ pipeline-order

def make_burst(prefix, count, rng, max_rounds):
    """count pipelined requests, mostly /work with random costs so that an
    order kept by accident would be unlikely; returns (bytes, expectations).
    """
    data, want = [], []
    for i in range(count):
        kind = rng.random()
        if kind < 0.80:
            token, rounds = "%s-%d" % (prefix, i), rng.randrange(max_rounds)
            data.append(request("/work?n=%d&id=%s" % (rounds, token)))
            want.append((200, work_body(token, rounds)))
        elif kind < 0.90:
            data.append(request("/health"))
            want.append((200, "ok\n"))
        elif kind < 0.97:
            data.append(request("/missing/%d" % i))
            want.append((404, None))
        else:
            data.append(request("/work?n=1"))  # no id
            want.append((400, None))
    return b"".join(data), want


def run_burst(server, prefix, count, seed, max_rounds, errors):
    rng = random.Random(seed)
    data, want = make_burst(prefix, count, rng, max_rounds)
    c = server.connect()
    try:
        sender = c.send_in_background(data)
        for i, (status, body) in enumerate(want):
            r = c.read_response()
            if r is None:
                errors.append("%s: EOF at answer %d" % (prefix, i))
                return
            if r[0] != status or (body is not None and r[2] != body):
                errors.append("%s: answer %d is %d %r, expected %d %r" %
                              (prefix, i, r[0], r[2][:80], status, body))
                return
        sender.join(30)
    except Exception as e:  # noqa: BLE001 - reported as a failure
        errors.append("%s: %r" % (prefix, e))
    finally:
        c.close()


SWITCH_ROUNDS = 250  # pipeline-order: --heavy-rounds, inside the bursts' costs


def test_pipeline_order(binary):
    for mode in ("pool", "loop", "inline"):
        # The costs of the first two kinds of burst straddle --heavy-rounds:
        # a connection's requests go to its interactive and its bulk worker
        # by turns, and the answers must still come in order.
        server = Server(binary, mode, threads=4,
                        extra=["--heavy-rounds", SWITCH_ROUNDS])
        try:
            errors = []
            # One socket, a burst of 600 requests sent at once.
            run_burst(server, "one-" + mode, 600, 1, 2000, errors)
            check(not errors, "; ".join(errors))
            # Eight sockets at once, 250 requests each.
            threads = [threading.Thread(target=run_burst, args=(
                server, "c%d-%s" % (k, mode), 250, 100 + k, 500, errors))
                for k in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            check(not errors, "; ".join(errors))
            # More than the server owes before it stops reading (1024).
            run_burst(server, "big-" + mode, 3000, 7, 20, errors)
            check(not errors, "; ".join(errors))
            st = server.stats()
            check(st["misrouted"] == 0, "heavy work ran outside bulk: %r" % st)
            if mode != "inline":
                check(st["switch_waits"] > 0,
                      "no heavy request waited for light ones: %r" % st)
            if mode == "pool":
                # Loop workers count in no group.
                check(st["bulk"]["ran"] > 0 and st["interactive"]["ran"] > 0,
                      "both groups ran work: %r" % st)
            print("%s: 5600 pipelined answers in order; %d heavy requests "
                  "waited for the light ones before them" %
                  (mode, st["switch_waits"]))
        finally:
            stop_ok(server)

    # The order check itself: a server that holds back one answer in five
    # on purpose must see it and exit 1.
    server = Server(binary, "pool", threads=4,
                    env={"HTTP_PIPELINE_FAULT": "reorder"})
    try:
        errors = []
        run_burst(server, "fault", 50, 3, 200, errors)
        check(errors, "the client saw the answers out of order")
    finally:
        rc = server.stop()
    check(rc == 1 and "answers_out_of_order=0 " not in server.stderr,
          "the server's order check caught it (exit %s): %s" %
          (rc, server.stderr))
    print("fault injection: answers out of order seen, exit 1")
    return 0


# ---------------------------------------------------------- disconnect

def test_disconnect(binary):
    for mode in ("pool", "loop"):
        server = Server(binary, mode, threads=2)
        try:
            # Costly requests, so that most are still queued at the close
            # (cheaper in loop mode, where they block the loop that would
            # see the disconnect).
            rounds = 20000 if mode == "pool" else 2000
            burst = b"".join(request("/work?n=%d&id=gone-%d" % (rounds, i))
                             for i in range(200))

            # 1. Read one answer, then vanish.
            c = server.connect()
            c.send(burst)
            r = c.read_response()
            check(r is not None and r[2] == work_body("gone-0", rounds),
                  "first answer before the disconnect")
            c.close()

            # 2. Vanish without reading anything; 3. several at once, with
            # a reset instead of a FIN.
            c = server.connect()
            c.send(burst)
            c.close()
            import socket
            import struct
            for _ in range(5):
                c = server.connect()
                c.send(burst)
                c.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                  struct.pack("ii", 1, 0))
                c.close()

            # The server stays up and gets back to idle: every task handed
            # back, only the /stats connection open.
            # (uvsched still holds one delayed task per open connection:
            # its deadline.)
            def idle():
                s = server.stats()
                return s["open"] == 1 and s["tasks_inflight"] == 0
            check(harness.wait_until(idle, 60), "server back to idle: %r" %
                  server.stats())
            s = server.stats()
            print("%s: %r" % (mode, s))
            check(s["cancelled"] > 0, "queued work was cancelled")
            check(s["tasks_ran"] + s["tasks_cancelled"] == s["tasks"],
                  "every task handed back once")
            check(s["uvs_pending"] == 1, "only the /stats connection's "
                  "deadline is pending in uvsched: %d" % s["uvs_pending"])
            c = server.connect()
            check(c.get("/health")[0] == 200, "still serving")
            c.close()
        finally:
            stop_ok(server)
        check("leaks=0" in server.stderr, "leak count printed")

    # A server stopped while work is queued and running hands it all back.
    server = Server(binary, "pool", threads=2)
    try:
        c = server.connect()
        c.send(b"".join(request("/work?n=20000&id=s-%d" % i)
                        for i in range(100)))
        c.read_response()
    finally:
        stop_ok(server)
    c.close()
    return 0


# -------------------------------------------------------------- errors

def test_errors(binary):
    server = Server(binary, "pool", threads=2)
    try:
        # Answers owed before a bad request are still sent, in order, then
        # the 400, then the server closes the connection.
        c = server.connect()
        c.send(request("/work?n=10&id=a") + request("/health") +
               request("/work?n=20&id=b") + b"BLAH\x01 / HTTP/1.1\r\n\r\n" +
               request("/health"))
        check(c.read_response()[2] == work_body("a", 10), "1st")
        check(c.read_response()[2] == "ok\n", "2nd")
        check(c.read_response()[2] == work_body("b", 20), "3rd")
        r = c.read_response()
        check(r[0] == 400 and r[1].get("connection") == "close",
              "400 with Connection: close: %r" % (r,))
        check(c.at_eof(), "closed after the 400")
        c.close()

        # Oversized request target, header block and body: 414, 431, 413,
        # closed.
        for raw, status in (
                (request("/" + "a" * 3000), 414),
                (request("/health", "X-Big: %s\r\n" % ("b" * 9000)), 431),
                (b"GET /health HTTP/1.1\r\nHost: t\r\n"
                 b"Content-Length: 100000\r\n\r\n", 413)):
            c = server.connect()
            c.send(request("/health") + raw)
            check(c.read_response()[0] == 200, "answer before the %d" % status)
            r = c.read_response()
            check(r is not None and r[0] == status,
                  "%d: %r" % (status, (r,)))
            check(c.at_eof(), "closed after the %d" % status)
            c.close()

        # 404 and 405 keep the connection; a body on a GET is read and
        # skipped.
        c = server.connect()
        check(c.get("/nope")[0] == 404, "404")
        c.send(b"POST /work HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
               b"\r\nhello")
        r = c.read_response()
        check(r[0] == 405 and r[1].get("allow") == "GET, HEAD",
              "405: %r" % (r,))
        c.send(b"GET /health HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n"
               b"\r\nabc")
        check(c.read_response()[2] == "ok\n", "GET with a body")
        check(c.get("/work?n=3&id=k")[2] == work_body("k", 3),
              "still alive")
        c.close()

        # Connection: close, and HTTP/1.0 without keep-alive: the answer,
        # then EOF; whatever was pipelined after it is not answered.
        c = server.connect()
        c.send(request("/work?n=7&id=last", "Connection: close\r\n") +
               request("/health"))
        r = c.read_response()
        check(r[2] == work_body("last", 7) and
              r[1].get("connection") == "close", "Connection: close")
        check(c.at_eof(), "closed after Connection: close")
        c.close()
        c = server.connect()
        c.send(request("/health", version="1.0"))
        check(c.read_response()[0] == 200, "HTTP/1.0")
        check(c.at_eof(), "HTTP/1.0 closed")
        c.close()
        c = server.connect()
        c.send(request("/health", "Connection: keep-alive\r\n", "1.0"))
        r = c.read_response()
        check(r[1].get("connection") == "keep-alive", "1.0 keep-alive")
        check(c.get("/health")[0] == 200, "1.0 keep-alive kept")
        c.close()

        # Garbage, and a client that half-closes mid-request.
        c = server.connect()
        c.send(b"\x00\x01\x02garbage\r\n\r\n")
        check(c.read_response()[0] == 400, "garbage: 400")
        c.close()
        c = server.connect()
        c.send(b"GET /work?n=1&id=x HTTP/1.1\r\nHo")
        c.sock.shutdown(1)
        check(c.read_response() is None, "half a request, then EOF")
        c.close()
    finally:
        stop_ok(server)
    return 0


# ----------------------------------------------------------------- wrk

def test_wrk(binary):
    if harness.wrk_path() is None:
        print("wrk is not installed")
        return SKIP
    ncpu = os.cpu_count() or 1
    for mode in ("pool", "loop"):
        server = Server(binary, mode, threads=ncpu)
        try:
            r, out = harness.run_wrk(server.url, duration_s=3,
                                     connections=16, threads=2, depth=16,
                                     rounds=200)
            sys.stdout.write(out)
            check(r, "wrk printed no uvs-wrk line")
            check(r["responses"] > 0, "wrk got answers")
            check(r["errors"] == 0, "%s: %d errors" % (mode, r["errors"]))
            check(r["out_of_order"] == 0,
                  "%s: %d out of order" % (mode, r["out_of_order"]))
            check(r["socket_errors"] == 0,
                  "%s: %d socket errors" % (mode, r["socket_errors"]))
        finally:
            stop_ok(server)
    return 0


# -------------------------------------------------------------- h2load

def run_h2load(url, requests=4000, connections=8, depth=16):
    args = ["h2load", "--h1", "-m", str(depth), "-c", str(connections),
            "-t", "1", "-n", str(requests), url]
    p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    out = p.stdout
    m = re.search(r"requests: (\d+) total, (\d+) started, (\d+) done, "
                  r"(\d+) succeeded, (\d+) failed, (\d+) errored, "
                  r"(\d+) timeout", out)
    c = re.search(r"status codes: (\d+) 2xx, (\d+) 3xx, (\d+) 4xx, "
                  r"(\d+) 5xx", out)
    check(p.returncode == 0 and m and c, "h2load: %s" % out)
    return [int(x) for x in m.groups()], [int(x) for x in c.groups()], out


def test_h2load(binary):
    if shutil.which("h2load") is None:
        print("h2load is not installed (Debian: nghttp2-client)")
        return SKIP
    for mode in ("pool", "loop"):
        server = Server(binary, mode, threads=os.cpu_count() or 1)
        try:
            for path in ("/work?n=200&id=h2load", "/health"):
                req, codes, out = run_h2load(server.url + path)
                print("%s %s: %s" % (mode, path, [
                    line for line in out.splitlines()
                    if line.startswith(("finished", "requests:"))]))
                total, started, done, ok, failed, errored, timeout = req
                check(total == done == ok == 4000 and
                      failed == errored == timeout == 0,
                      "%s %s: %r" % (mode, path, req))
                check(codes == [4000, 0, 0, 0], "%s %s: status codes %r" %
                      (mode, path, codes))
        finally:
            stop_ok(server)
    return 0


TESTS = {
    "curl": test_curl,
    "h2load": test_h2load,
    "pipeline-order": test_pipeline_order,
    "disconnect": test_disconnect,
    "errors": test_errors,
    "wrk": test_wrk,
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("test", choices=sorted(TESTS))
    ap.add_argument("--server", required=True)
    args = ap.parse_args()
    t0 = time.monotonic()
    try:
        rc = TESTS[args.test](args.server)
    except Failure as e:
        print("FAILED: %s" % e)
        return 1
    print("%s: %s in %.1fs" % (args.test, "skipped" if rc == SKIP else "ok",
                               time.monotonic() - t0))
    return rc


if __name__ == "__main__":
    sys.exit(main())
