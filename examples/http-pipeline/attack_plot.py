#!/usr/bin/python3
"""Measures http-pipeline under two attacks, for one or more server
binaries, and plots the figures of docs/backpressure.rst:

    examples/http-pipeline/attack_plot.py \\
        --server before=/tmp/http-pipeline-0.1 \\
        --server after=build/examples/http-pipeline/http-pipeline \\
        --json docs/backpressure.json -o docs/backpressure.png

never-read  100 clients pipeline /work?n=1 and never read, for
            --duration s; the server's VmRSS is sampled every 100 ms
fairness    4 connections pipeline 40 /work?n=200000 (~100 ms each) on a
            2-thread pool; a victim's light /work?n=1, on a fresh
            connection, 10 times: its latency

Servers are given as LABEL=PATH[:OPTION,OPTION...], e.g.
"after-sndbuf=build/.../http-pipeline:--sndbuf,65536"; a server of before
the limits existed takes no options. Runs on 127.0.0.1 only; run it niced
on a quiet machine. Needs matplotlib (Debian: python3-matplotlib).
"""

import argparse
import json
import os
import platform
import sys

sys.dont_write_bytecode = True  # No __pycache__ in the source tree.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_attack  # noqa: E402

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def parse_server(arg):
    label, _, rest = arg.partition("=")
    path, _, opts = rest.partition(":")
    return label, path, [o for o in opts.split(",") if o]


def measure(servers, duration, clients):
    out = {"machine": "%s, %d CPUs" % (platform.machine(), os.cpu_count()),
           "clients": clients, "duration_s": duration,
           "heavy_rounds": test_attack.HEAVY_ROUNDS, "runs": []}
    for label, path, opts in servers:
        nr = {}
        test_attack.test_never_read(path, clients, opts, report=nr,
                                    duration=duration)
        fair = {}
        test_attack.test_fairness(path, opts, report=fair, victims=10)
        out["runs"].append({"label": label, "options": opts,
                            "rss_idle_mb": nr["base"],
                            "rss_peak_mb": nr["peak"],
                            "rss_samples": nr["samples"],
                            "light_work_s": fair["work"],
                            "health_s": fair["health"]})
    return out


def plot(data, path):
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for run in data["runs"]:
        t = [s[0] for s in run["rss_samples"]]
        rss = [s[1] for s in run["rss_samples"]]
        left.plot(t, rss, label="%s (peak %.0f MB)" %
                  (run["label"], run["rss_peak_mb"]))
    left.set_xlabel("seconds since %d never-reading clients connected" %
                    data["clients"])
    left.set_ylabel("server VmRSS (MB)")
    left.set_ylim(bottom=0)
    left.set_title("Clients that pipeline and never read")
    left.legend(fontsize=8)
    left.grid(True, which="both", alpha=0.3)

    labels = [r["label"] for r in data["runs"]]
    for i, run in enumerate(data["runs"]):
        ys = run["light_work_s"]
        right.scatter([i] * len(ys), ys, s=18, alpha=0.7)
        right.annotate("max %.2f s" % max(ys), (i, max(ys)),
                       textcoords="offset points", xytext=(8, 0),
                       fontsize=8)
    right.set_xticks(range(len(labels)))
    right.set_xticklabels(labels)
    right.set_xlim(-0.5, len(labels) - 0.3)
    right.set_ylim(bottom=0)
    right.set_ylabel("latency of /work?n=1 (s)")
    right.set_title("A light request beside 4 x 40 heavy (~%d ms) ones" %
                    round(data["heavy_rounds"] * 0.47e-3))
    right.grid(True, axis="y", alpha=0.3)
    fig.suptitle("http-pipeline under attack, 2 pool threads (%s)" %
                 data["machine"], fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--server", action="append", required=True,
                    help="LABEL=PATH[:OPT,OPT...]")
    ap.add_argument("--duration", type=float, default=10)
    ap.add_argument("--clients", type=int, default=100)
    ap.add_argument("--json", help="write the figures here")
    ap.add_argument("--from-json", help="plot these figures, measure none")
    ap.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    if args.from_json:
        with open(args.from_json, encoding="utf-8") as f:
            data = json.load(f)
    else:
        data = measure([parse_server(s) for s in args.server],
                       args.duration, args.clients)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=1)
            f.write("\n")
    for run in data["runs"]:
        print("%-14s VmRSS idle %6.1f MB, peak %7.1f MB; light /work "
              "latency max %.3f s, median %.3f s; /health max %.3f s" % (
                  run["label"], run["rss_idle_mb"], run["rss_peak_mb"],
                  max(run["light_work_s"]),
                  sorted(run["light_work_s"])[len(run["light_work_s"]) // 2],
                  max(run["health_s"])))
    plot(data, args.output)
    print("wrote %s" % args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
