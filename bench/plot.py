#!/usr/bin/python3
"""Plots uvsched-bench JSON results against the targets the program prints.

    bench/plot.py -o before-after.png old.json:before new.json:after

Each targeted row of the table becomes a group of horizontal bars, one per
JSON file given (so a before/after pair shows side by side). A bar's length
is how far the row is from its target, as a factor: 1 is the target exactly,
more is better. For a ">= T" target that is ratio / T, for "<= T" it is
T / ratio (or T / value when the target is on uvsched's own figure). The
x axis is logarithmic; the figure printed at the end of each bar is the
measured ratio (or value).

Needs matplotlib (Debian: python3-matplotlib).
"""

import argparse
import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def attainment(row):
    """Returns (factor, label) for a targeted row, or None."""
    op = row.get("target_op")
    target = row.get("target_value")
    if op not in (">=", "<=") or target is None:
        return None
    on_value = row.get("target_on") == "uvsched"
    x = row.get("uvsched") if on_value else row.get("ratio")
    if x is None:
        return (float("nan"), "n/a")
    label = (f"{x:g} {row.get('unit', '')}".strip() if on_value
             else f"{x:.3g}x")
    if op == ">=":
        factor = x / target if target else float("inf")
    elif x <= 0:
        # "<= 0" (zero allocations) met, or a ratio that can't be worse.
        factor = 1.0 if x <= target else float("nan")
    else:
        factor = target / x if target else (1.0 if x <= target else 0.0)
    return (factor, label)


def load(arg):
    path, _, label = arg.partition(":")
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not label:
        label = f"uvsched {data.get('uvsched', '?')}"
    return label, data


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="+", help="JSON file[:label]")
    ap.add_argument("-o", "--output", default="uvsched-bench.png")
    ap.add_argument("--title", default=None)
    args = ap.parse_args()

    runs = [load(a) for a in args.results]
    # Rows in the order of the first file, then any the others add.
    names = []
    titles = {}
    for _, data in runs:
        for row in data["scenarios"]:
            if attainment(row) is None:
                continue
            if row["name"] not in titles:
                names.append(row["name"])
            titles[row["name"]] = f"{row['name']}  (target {row['target']})"
    if not names:
        sys.exit("plot.py: no targeted rows in the input")

    n = len(runs)
    height = 0.8 / n
    fig, ax = plt.subplots(figsize=(10, 0.4 * len(names) * n + 1.8))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    lo, hi = 0.5, 2.0
    for k, (label, data) in enumerate(runs):
        rows = {r["name"]: r for r in data["scenarios"]}
        ys, xs, texts = [], [], []
        for i, name in enumerate(names):
            a = attainment(rows[name]) if name in rows else None
            if a is None or math.isnan(a[0]):
                continue
            factor = min(max(a[0], 1e-3), 1e3)
            lo, hi = min(lo, factor), max(hi, factor)
            ys.append(i + (k - (n - 1) / 2) * height)
            xs.append(factor)
            texts.append(a[1])
        if n == 1:
            # One run: colour says met (green) or not (red).
            color = ["tab:green" if x >= 1 else "tab:red" for x in xs]
        else:
            color = colors[k % len(colors)]
        ax.barh(ys, xs, height=height * 0.9, color=color, label=label)
        for y, x, t in zip(ys, xs, texts):
            ax.text(x * 1.05, y, t, va="center", fontsize=7)
    ax.axvline(1.0, color="black", linewidth=1)
    ax.set_xscale("log")
    ax.set_xlim(lo / 1.5, hi * 3)
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels([titles[nm] for nm in names], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("distance to target (1 = target met exactly; right is "
                  "better)")
    machine = runs[0][1].get("machine", {})
    title = args.title or (
        f"uvsched-bench vs issue 3 targets — {machine.get('nproc', '?')} "
        f"cpus, {machine.get('cpu', '?')}, libuv {machine.get('libuv', '?')}")
    ax.set_title(title, fontsize=9)
    if n > 1:
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(args.output, dpi=110)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
