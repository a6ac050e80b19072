#!/usr/bin/python3
"""Draws a Chrome trace of examples/trace as swimlanes (docs/trace.png).

    build/examples/trace/example-trace /tmp/trace.json
    scripts/plot-trace.py /tmp/trace.json -o docs/trace.png

One row per track of the trace: the threads first (loop thread, then the
pool's), with their "run" spans; then each worker's queue tracks, with its
"queued" spans (accepted to started, or to handed back for a task that
never ran, drawn hatched). Spans are coloured by worker. Ticks on a thread
row mark "accepted" events, triangles on the loop thread "handed back".
Flows (a "s" and a "f" event of one id) are arrows, coloured by the
scheduled task's worker, from the tick where a run scheduled the task to
the start of the task's run. Runs shorter than MIN_MS are drawn MIN_MS
wide, so that the loop thread's short ones show. A development step, not a
CI one: the PNG is committed. Needs matplotlib (Debian:
python3-matplotlib; scripts/setup.sh's uvs_install_pkgs installs it).
"""

import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

MIN_MS = 0.15
COLORS = {"keyed": "tab:blue", "ingest": "tab:orange", "batch": "tab:green",
          "loop": "tab:purple"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace", help="a trace written by example-trace")
    ap.add_argument("-o", "--output", default="trace.png")
    a = ap.parse_args()
    with open(a.trace) as f:
        events = json.load(f)["traceEvents"]

    names = {e["tid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "thread_name"}
    tids = sorted(names)  # threads (below 100), then queue tracks
    row = {tid: i for i, tid in enumerate(tids)}
    fig, ax = plt.subplots(figsize=(11, 0.32 * len(tids) + 1.4))
    for e in events:
        if e["ph"] != "X":
            continue
        y = row[e["tid"]]
        color = COLORS.get(e["args"]["worker"], "grey")
        x, w = e["ts"] / 1e3, e["dur"] / 1e3
        if e["cat"] == "run":
            ax.broken_barh([(x, max(w, MIN_MS))], (y - 0.4, 0.8), facecolors=color,
                           edgecolors="black", linewidth=0.3)
        else:
            unrun = e["args"]["outcome"] != "started"
            ax.broken_barh([(x, w)], (y - 0.3, 0.6), facecolors=color,
                           alpha=0.45, hatch="///" if unrun else None,
                           edgecolors=color, linewidth=0.3)
    starts = {e["id"]: e for e in events if e["ph"] == "s"}
    for e in events:
        if e["ph"] != "f" or e["id"] not in starts:
            continue
        s = starts[e["id"]]
        ax.annotate("", xy=(e["ts"] / 1e3, row[e["tid"]]),
                    xytext=(s["ts"] / 1e3, row[s["tid"]]),
                    arrowprops=dict(arrowstyle="-|>", mutation_scale=7,
                                    color=COLORS.get(s["args"]["worker"],
                                                     "grey"),
                                    linewidth=0.8, shrinkA=0, shrinkB=0,
                                    connectionstyle="arc3,rad=-0.25"))
    for e in events:
        if e["ph"] not in ("i", "s"):  # a flow's start is an ACCEPTED
            continue
        y = row[e["tid"]]
        if e["ph"] == "s" or e["cat"] == "accepted":
            ax.plot([e["ts"] / 1e3] * 2, [y - 0.45, y + 0.45], color="black",
                    linewidth=0.4)
        else:
            ax.plot(e["ts"] / 1e3, y + 0.45, marker="v", markersize=3,
                    color="black" if e["args"]["status"] == "0" else "red")
    ax.set_yticks(range(len(tids)))
    ax.set_yticklabels([names[t] for t in tids], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("ms since the first event")
    ax.grid(axis="x", linewidth=0.3)
    ax.legend(handles=[Patch(color=c, label=w) for w, c in COLORS.items()],
              title="worker", fontsize=8, loc="lower right")
    ax.set_title("examples/trace: run spans per thread, queued spans per "
                 "worker, arrows from a run to the tasks it scheduled",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(a.output, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
