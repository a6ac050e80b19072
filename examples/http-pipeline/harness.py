"""Helpers shared by the http-pipeline tests (test_http.py) and the load
driver (load.py): start and stop a server, speak HTTP/1.1 over a raw socket,
and run wrk with pipeline.lua.

Servers bind 127.0.0.1 on port 0 and print the port they got; whoever starts
one stops it with SIGTERM and reads its exit status, which is 0 only if the
server's own checks held (order, no overlap, no leak, uv_loop_close).
"""

import hashlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LUA_SCRIPT = os.path.join(HERE, "pipeline.lua")


def expected_digest(token, rounds):
    """What GET /work?n=ROUNDS&id=TOKEN must answer: SHA-256 iterated."""
    d = hashlib.sha256(token.encode()).digest()
    for _ in range(rounds):
        d = hashlib.sha256(d).digest()
    return d.hex()


def work_body(token, rounds):
    return "id=%s n=%d sha256=%s\n" % (token, rounds,
                                       expected_digest(token, rounds))


class Server:
    """One http-pipeline process on 127.0.0.1 and a free port."""

    def __init__(self, binary, mode="pool", threads=None, extra=(),
                 env=None, preexec_fn=None):
        args = [binary, "--host", "127.0.0.1", "--port", "0", "--mode", mode]
        if threads:
            args += ["--threads", str(threads)]
        args += [str(a) for a in extra]
        self.args = args
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, **(env or {})),
                                     preexec_fn=preexec_fn)
        self._stderr = []
        self._err_thread = threading.Thread(target=self._drain_stderr,
                                            daemon=True)
        self._err_thread.start()
        line = self._read_banner(timeout=30)
        m = re.search(r"listening on http://([^ ]+):(\d+)", line)
        if not m:
            self.kill()
            raise RuntimeError("server did not start: %r %s" %
                               (line, "".join(self._stderr)))
        self.host = "127.0.0.1"
        self.port = int(m.group(2))
        self.url = "http://%s:%d" % (self.host, self.port)
        self.stderr = ""
        self.returncode = None

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self._stderr.append(line)

    def _read_banner(self, timeout):
        out = []
        t = threading.Thread(target=lambda: out.append(
            self.proc.stdout.readline()), daemon=True)
        t.start()
        t.join(timeout)
        return out[0] if out else ""

    def stop(self, timeout=60):
        """SIGTERM, then wait: returns the exit status (SIGKILL on hang)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            self._stderr.append("(killed: did not stop within %ds)\n" %
                                timeout)
        self._err_thread.join(10)
        self.proc.stdout.close()
        self.stderr = "".join(self._stderr)
        self.returncode = self.proc.returncode
        return self.returncode

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def connect(self, timeout=30, source=None):
        return Client(self.host, self.port, timeout, source)

    def stats(self, source=None):
        """/stats on a fresh connection, from the address source if given
        (another loopback address: 127.0.0.2)."""
        c = self.connect(source=source)
        try:
            status, _, body = c.get("/stats")
            if status != 200:
                raise RuntimeError("/stats answered %d" % status)
            import json
            return json.loads(body)
        finally:
            c.close()


class Client:
    """HTTP/1.1 over one socket: send raw bytes, read whole responses."""

    def __init__(self, host, port, timeout=30, source=None):
        self.sock = socket.create_connection(
            (host, port), timeout=timeout,
            source_address=None if source is None else (source, 0))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def send_in_background(self, data):
        """Sends from a thread, so that a large burst cannot deadlock with a
        server that stops reading until its answers are read."""
        t = threading.Thread(target=self.sock.sendall, args=(data,),
                             daemon=True)
        t.start()
        return t

    def _fill(self):
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self.buf += chunk
        return True

    def read_response(self, head=False):
        """(status, headers dict with lower-case names, body str), or None
        at EOF before a response starts. head: the answer to a HEAD request,
        which has a Content-Length but no body."""
        no_body = head
        while b"\r\n\r\n" not in self.buf:
            if not self._fill():
                if self.buf:
                    raise RuntimeError("EOF inside a response head: %r" %
                                       self.buf[:200])
                return None
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/1\.[01] (\d{3}) ", lines[0] + " ")
        if not m:
            raise RuntimeError("bad status line %r" % lines[0])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = 0 if no_body else int(headers.get("content-length", "0"))
        while len(self.buf) < length:
            if not self._fill():
                raise RuntimeError("EOF inside a response body")
        body, self.buf = self.buf[:length], self.buf[length:]
        return int(m.group(1)), headers, body.decode("latin-1")

    def get(self, path, extra_headers=""):
        self.send(request(path, extra_headers))
        r = self.read_response()
        if r is None:
            raise RuntimeError("EOF instead of a response to %s" % path)
        return r

    def at_eof(self):
        """True if the server closed the connection (after any buffered
        bytes); False if it sends nothing more within the socket timeout."""
        if self.buf:
            return False
        try:
            return not self._fill()
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()


def request(path, extra_headers="", version="1.1"):
    return ("GET %s HTTP/%s\r\nHost: test\r\n%s\r\n" %
            (path, version, extra_headers)).encode()


def wrk_path():
    return shutil.which("wrk")


def run_wrk(url, duration_s, connections, threads, depth=16, rounds=1000,
            timeout_s=30):
    """Runs wrk with pipeline.lua; returns (dict of the uvs-wrk line, the
    whole output). The dict is empty if the line is missing."""
    threads = max(1, min(threads, connections))
    args = ["wrk", "-t", str(threads), "-c", str(connections),
            "-d", "%ds" % duration_s, "--timeout", "%ds" % timeout_s,
            "-s", LUA_SCRIPT, url, "--", str(depth), str(rounds)]
    p = subprocess.run(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True,
                       timeout=duration_s + timeout_s + 60)
    result = {}
    for line in p.stdout.splitlines():
        if line.startswith("uvs-wrk:"):
            for field in line.split()[1:]:
                k, _, v = field.partition("=")
                result[k] = float(v)
    if p.returncode != 0:
        result = {}
    return result, p.stdout


def wait_until(pred, timeout=20, interval=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval)
    return pred()
