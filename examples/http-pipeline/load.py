#!/usr/bin/env python3
"""Drive http-pipeline with wrk in each mode and compare: the demo
(./demo.sh) and the HTTP figures of docs/benchmarks.rst come from here.

  load.py --server BUILDDIR/examples/http-pipeline/http-pipeline
          [--modes pool,loop] [--duration 10] [--connections 64]
          [--depth 16] [--rounds 1000] [--threads N] [--wrk-threads N]
          [--repeat 1] [--rst] [--svg FILE]

For each mode: start a server on a free port of 127.0.0.1 (--threads T sizes
libuv's pool; default: the number of CPUs), run wrk with pipeline.lua for
--duration seconds, stop the server with SIGTERM. Prints one line per run,
then a table: requests/s, latency p50 and p99, errors, answers out of order,
and the server's own verdict (its order, overlap and leak checks). With
--repeat N each mode runs N times, alternating, and the median run by
requests/s is reported. --rst prints the table as reStructuredText too, and
--svg writes a bar chart of requests/s and p99.

Exit status: 0 only if every run had zero errors, zero answers out of
order, zero socket errors, and every server exited 0.
"""

import argparse
import os
import platform
import sys

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def one_run(args, mode):
    server = harness.Server(args.server, mode, threads=args.threads)
    try:
        r, out = harness.run_wrk(server.url, args.duration, args.connections,
                                 args.wrk_threads, args.depth, args.rounds)
    finally:
        rc = server.stop()
    if not r:
        sys.stdout.write(out)
    r = dict(r)
    r["mode"] = mode
    r["server_rc"] = rc
    r["server_log"] = server.stderr
    r["ok"] = bool(r.get("responses")) and rc == 0 and all(
        r.get(k, 1) == 0 for k in ("errors", "out_of_order",
                                   "socket_errors"))
    return r


def fmt_ms(us):
    return "%.1f" % (us / 1000.0)


def print_table(rows):
    head = ("mode", "req/s", "p50 ms", "p99 ms", "errors", "out of order",
            "server checks")
    lines = [head] + [(
        r["mode"], "%.0f" % r.get("rps", 0), fmt_ms(r.get("p50_us", 0)),
        fmt_ms(r.get("p99_us", 0)),
        "%d" % (r.get("errors", 0) + r.get("socket_errors", 0)),
        "%d" % r.get("out_of_order", 0),
        "ok" if r["server_rc"] == 0 else "exit %s" % r["server_rc"])
        for r in rows]
    widths = [max(len(str(line[i])) for line in lines)
              for i in range(len(head))]
    for n, line in enumerate(lines):
        print("  ".join(str(c).rjust(w) if i else str(c).ljust(w)
                        for i, (c, w) in enumerate(zip(line, widths))))
        if n == 0:
            print("  ".join("-" * w for w in widths))


def print_rst(rows):
    print(".. list-table::")
    print("   :header-rows: 1")
    print()
    print("   * - mode")
    for h in ("requests/s", "p50 (ms)", "p99 (ms)", "errors",
              "out of order"):
        print("     - " + h)
    for r in rows:
        print("   * - ``%s``" % r["mode"])
        print("     - %.0f" % r.get("rps", 0))
        print("     - %s" % fmt_ms(r.get("p50_us", 0)))
        print("     - %s" % fmt_ms(r.get("p99_us", 0)))
        print("     - %d" % (r.get("errors", 0) + r.get("socket_errors", 0)))
        print("     - %d" % r.get("out_of_order", 0))


def write_svg(path, rows, caption):
    """Two bar groups, requests/s and p99, each scaled to its own maximum."""
    w, h, top, bottom, left = 640, 300, 40, 60, 20
    colors = {"pool": "#3a7bd5", "loop": "#d5813a", "inline": "#7a7a7a"}
    groups = [("requests/s", "rps", lambda v: "%.0f" % v),
              ("latency p99 (ms)", "p99_us", lambda v: "%.1f" % (v / 1000))]
    gw = (w - 2 * left) / len(groups)
    bw = gw / (len(rows) + 1)
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">'
           % (w, h, w, h),
           '<rect width="%d" height="%d" fill="white"/>' % (w, h),
           '<text x="%d" y="20" text-anchor="middle" font-size="13">%s'
           '</text>' % (w / 2, caption)]
    for g, (title, key, label) in enumerate(groups):
        vmax = max([r.get(key, 0) for r in rows] + [1e-9])
        x0 = left + g * gw + bw / 2
        for i, r in enumerate(rows):
            v = r.get(key, 0)
            bh = (h - top - bottom) * v / vmax
            x = x0 + i * bw
            y = h - bottom - bh
            out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" '
                       'fill="%s"/>' % (x + 4, y, bw - 8, bh,
                                        colors.get(r["mode"], "#555")))
            out.append('<text x="%.1f" y="%.1f" text-anchor="middle">%s'
                       '</text>' % (x + bw / 2, y - 4, label(v)))
            out.append('<text x="%.1f" y="%d" text-anchor="middle">%s'
                       '</text>' % (x + bw / 2, h - bottom + 16, r["mode"]))
        out.append('<text x="%.1f" y="%d" text-anchor="middle" '
                   'font-weight="bold">%s</text>'
                   % (left + g * gw + gw / 2, h - bottom + 38, title))
    out.append('<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>'
               % (left, h - bottom, w - left, h - bottom))
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def main():
    ncpu = os.cpu_count() or 1
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", required=True)
    ap.add_argument("--modes", default="pool,loop")
    ap.add_argument("--duration", type=int, default=10)
    ap.add_argument("--connections", type=int, default=64)
    ap.add_argument("--depth", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=ncpu,
                    help="libuv's pool size (default: CPUs)")
    ap.add_argument("--wrk-threads", type=int, default=ncpu)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--rst", action="store_true")
    ap.add_argument("--svg")
    args = ap.parse_args()

    if harness.wrk_path() is None:
        print("load.py: wrk is not installed (apt-get install wrk)")
        return 1
    modes = [m for m in args.modes.split(",") if m]
    print("wrk: %d s per run, %d connections, pipelining depth %d, "
          "%d wrk threads; /work?n=%d (SHA-256 rounds); pool: %d threads; "
          "%d CPUs" % (args.duration, args.connections, args.depth,
                       args.wrk_threads, args.rounds, args.threads, ncpu))
    runs = {m: [] for m in modes}
    for rep in range(args.repeat):
        for mode in modes:
            r = one_run(args, mode)
            runs[mode].append(r)
            print("%-6s run %d: %.0f req/s, p50 %s ms, p99 %s ms, %d errors, "
                  "%d socket errors, %d out of order, server %s" % (
                      mode, rep + 1, r.get("rps", 0),
                      fmt_ms(r.get("p50_us", 0)), fmt_ms(r.get("p99_us", 0)),
                      r.get("errors", -1), r.get("socket_errors", -1),
                      r.get("out_of_order", -1),
                      "ok" if r["server_rc"] == 0 else
                      "exit %s" % r["server_rc"]))
            if r["server_rc"] != 0 or not r.get("responses"):
                sys.stdout.write(r["server_log"])
            sys.stdout.flush()
    rows = []
    for mode in modes:
        ordered = sorted(runs[mode], key=lambda r: r.get("rps", 0))
        rows.append(ordered[len(ordered) // 2])
    print()
    print_table(rows)
    if len(rows) >= 2 and rows[1].get("rps"):
        print("%s / %s requests/s: %.2fx" % (
            rows[0]["mode"], rows[1]["mode"],
            rows[0].get("rps", 0) / rows[1]["rps"]))
    if args.rst:
        print()
        print_rst(rows)
    if args.svg:
        write_svg(args.svg, rows, "http-pipeline, %d connections, depth %d, "
                  "n=%d, %d CPUs (%s)" % (args.connections, args.depth,
                                         args.rounds, ncpu, platform.machine()))
        print("wrote %s" % args.svg)
    ok = all(r["ok"] for rs in runs.values() for r in rs)
    print("load: %s" % ("ok: no errors, no answer out of order" if ok
                        else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
