#!/usr/bin/env python3
"""Tests of examples/chat-rooms (meson suite 'examples'), one per name:

  rooms   4 rooms x 3 clients, each client sending 150 messages at once:
          every client gets exactly its room's 450 messages and no other
          room's, numbered 1..450 with an unbroken digest chain, each
          sender's messages in the order it sent them, and the same order
          at every member of the room
  limits  the caps and timeouts: a line over --max-line, a first line that
          is not JOIN, an unknown room, a client that says nothing for
          --idle-ms, a connection over --max-conns: each gets its ERR line
          and is closed, and the server goes on serving
  slow    a member that never reads is dropped when its output queue passes
          --max-outq; the room's other members get every message
  room-flood
          --room-queue 16: 6 clients flood room 1 with 300 messages each at
          once (32 in flight each: up to 192 queued without the bound)
          while 2 clients in room 2 trade messages one at a time: every
          room-2 message reaches both within QUIET_BOUND_S, the server
          stops the room-1 senders (room_stalls, room_wakes) and queues at
          most 16 of room 1's messages (the worker's queued_max at most
          16 + 2), and every member of room 1 gets all 1800 messages, in
          order, none lost
  room-stall
          --room-queue 8, 500 ms per message, --idle-ms 1000: a sender of
          10 messages waits 2 s for its room without being read, and is
          not closed as idle meanwhile (it pings every 100 ms, read once
          the room has space); once it stops pinging it is
  reload  --config FILE, 8 rooms x 2 clients each flooding 500 messages
          ("m NICK I alpha beta gamma"), and 3 SIGHUPs while they are in
          flight, each with new words to mask: every member gets a CONFIG
          line per reload, at the same place among its room's messages at
          every member; every message before CONFIG g is masked with the
          words of generation g - 1 and every one after with those of g
          (no message filtered half and half), numbered and chained as
          always, none lost; every generation ran messages of at least
          half the rooms (the reloads came under load); the
          server reports reloads=3, no message run beside a barrier
          (barrier_overlaps) and none handed back under another generation
          (stale_config); the ASan build would catch a task reading a
          freed configuration

  test_chat.py NAME --server BUILDDIR/examples/chat-rooms/chat-rooms
  test_chat.py rooms --rooms 16 --per-room 2 --messages 300 --server ...

Each test starts its own server on a free port of 127.0.0.1 and stops it with
SIGTERM; a server that exits non-zero (its own order, overlap and leak checks)
fails the test. Every socket has a timeout, every loop a bound. Exit status:
0 passed, 1 failed.
"""

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

FNV_OFFSET = 0xcbf29ce484222325
FNV_PRIME = 0x100000001b3
MASK = (1 << 64) - 1
TIMEOUT = 20  # seconds for any one socket operation
QUIET_BOUND_S = 1.0  # room-flood: a message of another room, sent to seen


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def fnv1a(h, data):
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & MASK
    return h


class Server:
    def __init__(self, binary, *extra):
        self.args = [binary, "--host", "127.0.0.1", "--port", "0"] + list(extra)
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.err = []
        self.t = threading.Thread(target=lambda: self.err.extend(
            self.proc.stderr), daemon=True)
        self.t.start()
        line = self.proc.stdout.readline()
        m = re.search(r"listening on ([0-9.]+):(\d+)", line)
        if not m:
            self.proc.kill()
            raise Failure("server did not start: %r" % line)
        self.port = int(m.group(2))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
            self.err.append("(killed: did not stop within 30 s)\n")
        self.t.join(10)
        self.proc.stdout.close()
        sys.stdout.write("".join(self.err))
        check(rc == 0, "server exited %s" % rc)
        return "".join(self.err)


class Client:
    def __init__(self, port, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(TIMEOUT)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def send(self, data):
        self.sock.sendall(data)

    def line(self):
        """The next line, or None at EOF."""
        while b"\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode()

    def join(self, room, nick):
        self.send(b"JOIN %d %s\n" % (room, nick.encode()))
        line = self.line()
        check(line == "JOINED %d" % room, "JOIN answered %r" % line)

    def expect_err(self, what):
        line = self.line()
        check(line == "ERR " + what, "expected ERR %s, got %r" % (what, line))
        rest = self.line()
        check(rest is None, "expected close after ERR %s, got %r" % (what,
                                                                      rest))

    def close(self):
        self.sock.close()


def check_room(room, logs, senders, per):
    """logs: {nick: [MSG lines]} of one room's members."""
    want = len(senders) * per
    first = None
    for nick, lines in logs.items():
        check(len(lines) == want, "%s in room %d got %d of %d messages" %
              (nick, room, len(lines), want))
        h = FNV_OFFSET
        sent = {s: 0 for s in senders}
        for i, line in enumerate(lines):
            parts = line.split(" ", 5)
            check(len(parts) == 6 and parts[0] == "MSG", "bad line %r" % line)
            check(int(parts[1]) == room, "%s in room %d got %r" %
                  (nick, room, line))
            check(int(parts[2]) == i + 1, "%s: seq %s at %d" %
                  (nick, parts[2], i + 1))
            h = fnv1a(h, parts[5].encode())
            check(int(parts[3], 16) == h, "%s: digest chain broken at %d" %
                  (nick, i + 1))
            sender = parts[4]
            check(sender in sent, "%s: unknown sender %r" % (nick, sender))
            check(parts[5] == "m %s %d" % (sender, sent[sender]),
                  "%s: %s's message %r out of send order (want %d)" %
                  (nick, sender, parts[5], sent[sender]))
            sent[sender] += 1
        if first is None:
            first = lines
        check(lines == first, "%s saw room %d in another order" % (nick, room))


def test_rooms(binary, rooms=4, per_room=3, per=150):
    server = Server(binary, "--rooms", str(max(8, rooms)), "--work-us", "50")
    try:
        clients = {}
        for r in range(1, rooms + 1):
            for k in range(per_room):
                nick = "r%du%d" % (r, k)
                c = Client(server.port)
                c.join(r, nick)
                clients[nick] = (r, c)
        logs = {nick: [] for nick in clients}
        errors = []

        def run(nick, room, c):
            try:
                # Sends and reads at once, as a chat client does: the
                # server pauses reading a sender past --max-inflight.
                def reader():
                    try:
                        for _ in range(per_room * per):
                            line = c.line()
                            if line is None:
                                break
                            logs[nick].append(line)
                    except Exception as e:  # noqa: BLE001
                        errors.append("%s: %s" % (nick, e))
                t = threading.Thread(target=reader)
                t.start()
                for i in range(per):
                    c.send(("m %s %d\n" % (nick, i)).encode())
                t.join(TIMEOUT * 3)
                if t.is_alive():
                    errors.append("%s: reader hung" % nick)
            except Exception as e:  # noqa: BLE001
                errors.append("%s: %s" % (nick, e))

        threads = [threading.Thread(target=run, args=(n, r, c))
                   for n, (r, c) in clients.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join(TIMEOUT * 4)
        check(not errors, "; ".join(errors))
        for r in range(1, rooms + 1):
            members = [n for n, (rr, _) in clients.items() if rr == r]
            check_room(r, {n: logs[n] for n in members}, members, per)
        for _, c in clients.values():
            c.close()
        print("rooms: %d clients in %d rooms, %d messages each, all in order"
              % (len(clients), rooms, per))
    finally:
        err = server.stop()
    m = re.search(r"max_parallel=(\d+)", err)
    check(m is not None, "no max_parallel in the server's report")
    print("rooms: at most %s messages ran at once" % m.group(1))
    return 0


def test_limits(binary):
    server = Server(binary, "--max-line", "64", "--idle-ms", "300",
                    "--max-conns", "3", "--rooms", "4")
    try:
        c = Client(server.port)
        c.join(1, "a")
        c.send(b"x" * 100 + b"\n")
        c.expect_err("line too long")
        c.close()

        c = Client(server.port)
        c.send(b"HELLO\n")
        c.expect_err("expected JOIN <room> <nick>")
        c.close()

        c = Client(server.port)
        c.send(b"JOIN 5 a\n")
        c.expect_err("expected JOIN <room> <nick>")
        c.close()

        c = Client(server.port)
        t0 = time.monotonic()
        c.join(1, "quiet")
        c.expect_err("idle")
        took = time.monotonic() - t0
        check(took < 10, "idle close took %.1f s" % took)
        c.close()

        held = []
        for k in range(3):
            h = Client(server.port)
            h.join(2, "h%d" % k)
            h.send(b"PING\n")
            check(h.line() == "PONG", "no PONG")
            held.append(h)
        extra = Client(server.port)
        extra.expect_err("full")
        extra.close()
        # The held ones still talk.
        held[0].send(b"hello\n")
        for h in held:
            line = h.line()
            check(line is not None and line.startswith("MSG 2 1 ")
                  and line.endswith(" h0 hello"), "got %r" % line)
        for h in held:
            h.close()
        # Room for a new one once they are gone (the server sees the EOFs).
        deadline = time.monotonic() + 10
        while True:
            c = Client(server.port)
            c.send(b"JOIN 3 z\n")
            line = c.line()
            c.close()
            if line == "JOINED 3":
                break
            check(line == "ERR full" and time.monotonic() < deadline,
                  "after the close: %r" % line)
            time.sleep(0.05)
        print("limits: line cap, bad JOIN, idle timeout, connection cap")
    finally:
        server.stop()
    return 0


def test_slow(binary):
    n, window = 2000, 50
    server = Server(binary, "--max-outq", "65536", "--sndbuf", "4096",
                    "--rooms", "2", "--max-line", "512")
    try:
        slow = Client(server.port, rcvbuf=4096)
        slow.join(1, "slow")
        reader = Client(server.port)
        reader.join(1, "reader")
        sender = Client(server.port)
        sender.join(1, "sender")
        # One thread, a window of messages at a time: the two readers are
        # never more than a window behind, so only the member that does not
        # read at all can pass --max-outq.
        pad = "p" * 200
        got = []
        for base in range(0, n, window):
            sender.send(b"".join(("%d %s\n" % (i, pad)).encode()
                                 for i in range(base, base + window)))
            for _ in range(window):
                check(sender.line() is not None, "sender closed")
                line = reader.line()
                check(line is not None, "reader closed")
                got.append(line)
        for i, line in enumerate(got):
            check(line.split(" ", 5)[5] == "%d %s" % (i, pad),
                  "message %d out of order" % i)
        # The slow one was dropped: what it was sent ends in EOF.
        total = 0
        while True:
            chunk = slow.sock.recv(65536)
            if not chunk:
                break
            total += len(chunk)
        check(total < n * len(pad), "the slow member got everything")
        for c in (slow, reader, sender):
            c.close()
    finally:
        err = server.stop()
    m = re.search(r"slow_dropped=(\d+)", err)
    check(m is not None and int(m.group(1)) == 1,
          "slow_dropped is not 1: %s" % (m.group(1) if m else None))
    print("slow: the member that did not read was dropped; the others got "
          "all %d messages in order" % n)
    return 0


def reader(c, want, log, errors, nick):
    """Reads want lines of c into log (a thread)."""
    def run():
        try:
            for _ in range(want):
                line = c.line()
                if line is None:
                    errors.append("%s: EOF after %d lines" % (nick, len(log)))
                    return
                log.append(line)
        except Exception as e:  # noqa: BLE001
            errors.append("%s: %s" % (nick, e))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def server_figure(err, name):
    m = re.search(r"\b%s=(\d+)" % name, err)
    check(m is not None, "no %s in the server's report" % name)
    return int(m.group(1))


def test_room_flood(binary, writers=6, per=300, room_queue=16):
    server = Server(binary, "--rooms", "4", "--room-queue", str(room_queue),
                    "--work-us", "300")
    try:
        flood = {}
        for k in range(writers):
            nick = "f%d" % k
            c = Client(server.port)
            c.join(1, nick)
            flood[nick] = c
        q0 = Client(server.port)
        q0.join(2, "q0")
        q1 = Client(server.port)
        q1.join(2, "q1")

        want = writers * per
        logs = {nick: [] for nick in flood}
        errors = []
        readers = [reader(c, want, logs[nick], errors, nick)
                   for nick, c in flood.items()]
        # Each writer sends all its messages at once: the server reads them
        # as fast as the room lets it.
        for nick, c in flood.items():
            c.send(b"".join(("m %s %d\n" % (nick, i)).encode()
                            for i in range(per)))

        # Meanwhile room 2, one message at a time, until room 1 is through.
        quiet = {"q0": [], "q1": []}
        lat = []
        i = 0
        while any(t.is_alive() for t in readers) and i < 5000:
            t0 = time.monotonic()
            q0.send(("m q0 %d\n" % i).encode())
            for nick, c in (("q0", q0), ("q1", q1)):
                line = c.line()
                check(line is not None, "%s closed" % nick)
                quiet[nick].append(line)
            lat.append(time.monotonic() - t0)
            i += 1
        for t in readers:
            t.join(TIMEOUT * 3)
            check(not t.is_alive(), "a room-1 reader hung")
        check(not errors, "; ".join(errors))
        check(len(lat) > 0, "room 2 sent nothing during the flood")
        check_room(1, logs, list(flood), per)
        check_room(2, quiet, ["q0"], len(lat))
        worst = max(lat)
        print("room-flood: %d x %d messages into room 1 (--room-queue %d), "
              "all in order; room 2: %d messages meanwhile, worst %.1f ms, "
              "median %.1f ms" %
              (writers, per, room_queue, len(lat), worst * 1e3,
               sorted(lat)[len(lat) // 2] * 1e3))
        check(worst < QUIET_BOUND_S, "room 2 waited %.2f s" % worst)
        for c in list(flood.values()) + [q0, q1]:
            c.close()
    finally:
        err = server.stop()
    stalls = server_figure(err, "room_stalls")
    wakes = server_figure(err, "room_wakes")
    queued_max = server_figure(err, "queued_max")
    print("room-flood: room_stalls=%d room_wakes=%d queued_max=%d" %
          (stalls, wakes, queued_max))
    check(stalls > 0 and wakes > 0, "room 1 was never full")
    # The worker's queued count is room 1's (at most --room-queue), the
    # room-1 task a lane has taken and not started yet (the room's count
    # lets it go when it is taken, the worker's when it starts) and room
    # 2's one message.
    check(queued_max <= room_queue + 2,
          "queued_max %d over --room-queue %d" % (queued_max, room_queue))
    return 0


def test_room_stall(binary, room_queue=8, n=10, work_ms=500, idle_ms=1000):
    server = Server(binary, "--room-queue", str(room_queue), "--work-us",
                    str(work_ms * 1000), "--idle-ms", str(idle_ms))
    try:
        c = Client(server.port)
        c.join(1, "w")
        t0 = time.monotonic()
        # One runs, room_queue wait, the next is kept and the sender stops
        # reading until the room falls to half: (room_queue / 2) runs.
        c.send(b"".join(b"m w %d\n" % i for i in range(n)))
        got = []
        pongs = 0
        c.sock.settimeout(0.1)
        while len(got) < n and time.monotonic() - t0 < 30:
            try:
                line = c.line()
            except socket.timeout:
                c.send(b"PING\n")  # Not idle: but unread while it waits.
                continue
            check(line is not None and not line.startswith("ERR"),
                  "closed while its room was full: %r after %.2f s" %
                  (line, time.monotonic() - t0))
            if line == "PONG":
                pongs += 1
            else:
                got.append(line)
        took = time.monotonic() - t0
        check([g.split(" ", 5)[5] for g in got] ==
              ["m w %d" % i for i in range(n)], "messages: %r" % got)
        # Silent now: closed as idle, counted from when it read again.
        c.sock.settimeout(TIMEOUT)
        while True:
            line = c.line()
            if line != "PONG":
                break
        t_idle = time.monotonic() - t0
        check(line == "ERR idle", "expected ERR idle, got %r" % line)
        print("room-stall: %d messages of %d ms through --room-queue %d in "
              "%.1f s with --idle-ms %d, %d PONGs; then idle after %.1f s" %
              (n, work_ms, room_queue, took, idle_ms, pongs, t_idle))
        c.close()
    finally:
        err = server.stop()
    check(server_figure(err, "room_stalls") >= 1, "the room was never full")
    return 0


# reload: the words each configuration generation masks.
RELOAD_WORDS = {1: ["alpha"], 2: ["beta"], 3: ["gamma", "alpha"],
                4: ["beta", "gamma"]}


def masked(gen, text):
    for w in RELOAD_WORDS[gen]:
        text = text.replace(w, "*" * len(w))
    return text


def write_config(path, gen):
    tmp = path + ".new"
    with open(tmp, "w") as f:
        f.write("# generation %d\n\n" % gen)
        f.write("".join(w + "\n" for w in RELOAD_WORDS[gen]))
    os.replace(tmp, path)


def check_reload_room(room, logs, senders, per, last_gen):
    """logs: {nick: [lines]} of one room's members, MSG and CONFIG lines.
    Returns {gen: messages} for the room."""
    first = None
    by_gen = {}
    for nick, lines in logs.items():
        h = FNV_OFFSET
        gen = 1
        seq = 0
        sent = {s: 0 for s in senders}
        by_gen = {}
        for line in lines:
            if line.startswith("CONFIG "):
                g = int(line.split()[1])
                check(g == gen + 1, "%s: CONFIG %d after generation %d" %
                      (nick, g, gen))
                gen = g
                continue
            parts = line.split(" ", 5)
            check(len(parts) == 6 and parts[0] == "MSG", "bad line %r" % line)
            check(int(parts[1]) == room, "%s in room %d got %r" %
                  (nick, room, line))
            seq += 1
            check(int(parts[2]) == seq, "%s: seq %s at %d" %
                  (nick, parts[2], seq))
            h = fnv1a(h, parts[5].encode())
            check(int(parts[3], 16) == h, "%s: digest chain broken at %d" %
                  (nick, seq))
            sender = parts[4]
            check(sender in sent, "%s: unknown sender %r" % (nick, sender))
            want = masked(gen, "m %s %d alpha beta gamma" %
                          (sender, sent[sender]))
            check(parts[5] == want, "%s: %r under generation %d, want %r" %
                  (nick, parts[5], gen, want))
            sent[sender] += 1
            by_gen[gen] = by_gen.get(gen, 0) + 1
        check(gen == last_gen, "%s: ended with generation %d, not %d" %
              (nick, gen, last_gen))
        check(seq == len(senders) * per, "%s in room %d got %d of %d "
              "messages" % (nick, room, seq, len(senders) * per))
        if first is None:
            first = lines
        check(lines == first, "%s saw room %d in another order" % (nick, room))
    return by_gen


def test_reload(binary, rooms=8, per_room=2, per=500, reloads=3):
    tmpdir = tempfile.TemporaryDirectory()
    path = os.path.join(tmpdir.name, "words")
    write_config(path, 1)
    server = Server(binary, "--rooms", str(rooms), "--work-us", "300",
                    "--config", path)
    try:
        clients = {}
        for r in range(1, rooms + 1):
            for k in range(per_room):
                nick = "r%du%d" % (r, k)
                c = Client(server.port)
                c.join(r, nick)
                clients[nick] = (r, c)
        want = per_room * per + reloads  # MSG lines and CONFIG lines
        logs = {nick: [] for nick in clients}
        errors = []
        readers = [reader(c, want, logs[nick], errors, nick)
                   for nick, (_, c) in clients.items()]
        for nick, (_, c) in clients.items():
            c.send(b"".join(("m %s %d alpha beta gamma\n" % (nick, i))
                            .encode() for i in range(per)))
        # Reload while the rooms are busy: when the watched member has
        # seen a fifth, two fifths, three fifths of its room's messages,
        # and only once it has seen the previous reload's CONFIG line.
        watched = logs["r1u0"]
        deadline = time.monotonic() + TIMEOUT * 3
        for g in range(2, reloads + 2):
            mark = per_room * per * (g - 1) // (reloads + 2)
            while (sum(1 for x in list(watched) if x.startswith("MSG")) <
                   mark or ("CONFIG %d" % (g - 1) not in watched and g > 2)):
                check(time.monotonic() < deadline and not errors,
                      "stuck before reload %d: %s" % (g, "; ".join(errors)))
                time.sleep(0.002)
            write_config(path, g)
            server.proc.send_signal(signal.SIGHUP)
        for t in readers:
            t.join(TIMEOUT * 3)
            check(not t.is_alive(), "a reader hung")
        check(not errors, "; ".join(errors))
        total = {}
        busy = {}  # generation: rooms that ran messages with it
        for r in range(1, rooms + 1):
            members = [n for n, (rr, _) in clients.items() if rr == r]
            by_gen = check_reload_room(r, {n: logs[n] for n in members},
                                       members, per, reloads + 1)
            for g, n in by_gen.items():
                total[g] = total.get(g, 0) + n
                busy[g] = busy.get(g, 0) + 1
        print("reload: %d rooms x %d clients x %d messages, %d reloads; "
              "messages (rooms) per generation: %s" %
              (rooms, per_room, per, reloads,
               ", ".join("%d: %d (%d)" % (g, total[g], busy[g])
                         for g in sorted(total))))
        # Each barrier came while messages of many rooms were in flight:
        # every generation, the first and the last too, ran messages of
        # at least half the rooms.
        check(sorted(total) == list(range(1, reloads + 2)),
              "a generation ran no message: %s" % total)
        check(min(busy.values()) >= rooms // 2,
              "a generation ran messages of few rooms: %s" % busy)
        for _, c in clients.values():
            c.close()
    finally:
        err = server.stop()
        tmpdir.cleanup()
    check(server_figure(err, "reloads") == reloads, "reloads is not %d" %
          reloads)
    check(server_figure(err, "config_gen") == reloads + 1, "config_gen")
    check(server_figure(err, "reload_fails") == 0, "a reload failed")
    check(server_figure(err, "barrier_overlaps") == 0, "barrier_overlaps")
    check(server_figure(err, "stale_config") == 0, "stale_config")
    return 0


TESTS = {"rooms": test_rooms, "limits": test_limits, "slow": test_slow,
         "room-flood": test_room_flood, "room-stall": test_room_stall,
         "reload": test_reload}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=sorted(TESTS))
    ap.add_argument("--server", required=True)
    ap.add_argument("--rooms", type=int, default=4, help="rooms: rooms used")
    ap.add_argument("--per-room", type=int, default=3,
                    help="rooms: clients per room")
    ap.add_argument("--messages", type=int, default=150,
                    help="rooms: messages per client")
    a = ap.parse_args()
    try:
        if a.name == "rooms":
            return test_rooms(a.server, a.rooms, a.per_room, a.messages)
        return TESTS[a.name](a.server)
    except (Failure, OSError) as e:
        print("FAIL: %s" % e)
        return 1


if __name__ == "__main__":
    sys.exit(main())
