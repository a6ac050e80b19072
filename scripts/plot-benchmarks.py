#!/usr/bin/python3
"""Draws the plot of docs/benchmarks.md from one uvsched-bench JSON.

    scripts/plot-benchmarks.py [docs/benchmarks-0.3.json] [-o docs/benchmarks-0.3.png]

One horizontal bar per row that the page's tables show, the users' view
first, then the 0.3 additions, then the per-task rows: how many times
better uvsched did than the row's baseline, on a log scale. For a rate
(tasks/s) that is the row's ratio uvsched / baseline; for a cost or a time
(ns, us, ms) it is baseline / uvsched. Right of 1 is better than the
baseline. A development step, not a CI one: the PNG is committed beside the
JSON. Needs matplotlib (Debian: python3-matplotlib).
"""

import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DOCS = os.path.join(os.path.dirname(HERE), "docs")

# (row name in the JSON, label on the plot), in the page's order.
ROWS = [
    ("u1.hol-serial.p99", "u1 head of line, serial: start p99 vs naive"),
    ("u2.hol-keyed.p99", "u2 head of line, width 4 keyed: p99 vs naive"),
    ("u3.mix.p50", "u3 server mix: short tasks' sojourn p50 vs naive"),
    ("u3.mix.p99", "u3 server mix: short tasks' sojourn p99 vs naive"),
    ("u4.dep.total", "u4 burst + cross-worker wait vs naive"),
    ("u5.keyed-rate", "u5 keyed 7 us tasks vs chained uv_queue_work"),
    ("r1.rearm", "r1 uvs_task_reschedule vs uv_timer_start"),
    ("r2.rearm-foreign", "r2 the same from a foreign thread"),
    ("r3.idle-timeouts", "r3 100k idle timeouts: loop CPU"),
    ("r5.key-bounds", "r5 key_max_pending on vs off"),
    ("r6.max-wait", "r6 max_wait_ms on vs off"),
    ("s1.raw", "s1 one pool worker vs raw uv_queue_work"),
    ("s1.naive", "s1 one pool worker vs naive"),
    ("s3.naive", "s3 foreign thread to a pool worker vs naive"),
    ("s4.bridge", "s4 foreign thread to a loop worker vs bridge"),
    ("s4.latency", "s4 latency to an idle loop vs bridge"),
    ("s5.timers", "s5 schedule_after + cancel vs uv_timer_t"),
    ("s6.cpu", "s6 timers firing: loop CPU vs uv_timer_t"),
    ("s8.post", "s8 uvs_post vs intrusive schedule"),
    ("s10.keyed", "s10 keyed, 100k keys vs a serial worker"),
]

RATES = ("tasks/s",)


def better(row):
    """How many times better than the baseline uvsched did, or None."""
    r = row.get("ratio")
    if not r:
        return None
    return r if row.get("unit") in RATES else 1.0 / r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("json", nargs="?",
                    default=os.path.join(DOCS, "benchmarks-0.3.json"))
    ap.add_argument("-o", "--output",
                    default=os.path.join(DOCS, "benchmarks-0.3.png"))
    args = ap.parse_args()

    with open(args.json, encoding="utf-8") as f:
        data = json.load(f)
    rows = {r["name"]: r for r in data["scenarios"]}
    labels, xs = [], []
    for name, label in ROWS:
        if name not in rows or better(rows[name]) is None:
            sys.exit(f"plot-benchmarks: no ratio for {name} in {args.json}")
        labels.append(label)
        xs.append(better(rows[name]))

    fig, ax = plt.subplots(figsize=(9, 0.32 * len(xs) + 1.6))
    ys = range(len(xs))
    ax.barh(ys, xs, color="tab:blue", height=0.7)
    for y, x in zip(ys, xs):
        ax.text(x * 1.04, y, f"{x:.2g}x", va="center", fontsize=7)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(min(xs) / 1.6, max(xs) * 2.5)
    ticks = [t for t in (0.125, 0.25, 0.5, 1, 2, 4, 8)
             if min(xs) / 1.6 <= t <= max(xs) * 2.5]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.set_yticks(list(ys))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("times better than the baseline (right of 1x: uvsched "
                  "better)", fontsize=8)
    m = data.get("machine", {})
    ax.set_title(f"uvsched {data.get('uvsched', '?')}, one full run: "
                 f"{m.get('nproc', '?')} CPUs, {m.get('cpu', '?')}, "
                 f"libuv {m.get('libuv', '?')}, {m.get('buildtype', '?')} "
                 f"build, {m.get('date', '?')[:10]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(args.output, dpi=100)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
