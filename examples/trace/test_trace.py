#!/usr/bin/env python3
"""Tests of examples/trace (meson suite 'examples'), one per name:

  spans  the program writes its trace with room for every event: the file
         is Chrome trace-event JSON; every span is closed (an "X" event with
         a duration of 0 or more; a "B" would need its "E" on the same
         track); the spans of a track nest, as the viewers need; the
         counts of accepted, run, queued and handed-back events are the
         ones the program counted itself; each task is accepted before it
         starts, and each queued span ends where its run starts; and the
         flows: as many as the schedule calls the program made from inside
         a run_cb, each start with its one end, the start inside the
         parent's run where the task was accepted, the end inside the
         task's run that followed, on another worker than the parent's,
         and no other slice of the track between each run's start and the
         flow's end in it, so that chrome://tracing and Perfetto both bind
         the flow to those two runs
  lost   the same program with 16 records per thread: events are lost and
         counted, and what was written is still a valid trace whose spans
         all close and whose flows all end, each from a run to a run; some
         flows are there (the first parse and its requests run on threads
         whose buffers still have room), not all (the loop thread's buffer
         is full before the first reply runs)

  test_trace.py NAME --program BUILDDIR/examples/trace/example-trace

Exit status: 0 passed, 1 failed.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile

EPS = 0.0015  # us: timestamps are written with 3 decimals


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def run(program, path, cap=None):
    args = [program, path] + ([str(cap)] if cap is not None else [])
    p = subprocess.run(args, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=50)
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    check(p.returncode == 0, "the program exited %d" % p.returncode)
    m = re.search(r"^expected: accepted=(\d+) runs=(\d+) handed_back=(\d+) "
                  r"cancelled=(\d+) flows=(\d+)$", p.stdout, re.M)
    check(m, "no expected counts in the output")
    want = dict(zip(["accepted", "runs", "handed_back", "cancelled", "flows"],
                    map(int, m.groups())))
    m = re.search(r"^wrote .*: (\d+) threads, (\d+) events lost$", p.stdout,
                  re.M)
    check(m, "no 'wrote' line in the output")
    want["lost"] = int(m.group(2))
    with open(path) as f:
        trace = json.load(f)
    return want, trace


def check_format(trace):
    """The shape that Perfetto and chrome://tracing read; returns the events
    other than metadata."""
    check(isinstance(trace, dict) and isinstance(trace.get("traceEvents"),
                                                 list), "no traceEvents list")
    events = []
    names = set()
    for e in trace["traceEvents"]:
        check(isinstance(e, dict) and "ph" in e and "pid" in e,
              "an event without ph or pid: %r" % e)
        if e["ph"] == "M":
            if e["name"] == "thread_name":
                names.add(e["tid"])
            continue
        check(e["ph"] in ("X", "B", "E", "i", "s", "f"),
              "unexpected ph: %r" % e)
        check(e["ph"] not in ("s", "f") or "id" in e,
              "a flow event without an id: %r" % e)
        check(isinstance(e.get("ts"), (int, float)) and "tid" in e,
              "an event without ts or tid: %r" % e)
        check(e["ph"] == "E" or isinstance(e.get("name"), str),
              "an event without a name: %r" % e)
        events.append(e)
    for e in events:
        check(e["tid"] in names, "track %r has no thread_name" % e["tid"])
    return events


def check_spans(events):
    """Every span closes, and the spans of a track nest."""
    by_tid = collections.defaultdict(list)
    open_b = collections.defaultdict(list)
    for e in sorted(events, key=lambda e: e["ts"]):
        if e["ph"] == "X":
            check(isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0,
                  "an X event without a duration of 0 or more: %r" % e)
            by_tid[e["tid"]].append((e["ts"], e["ts"] + e["dur"], e))
        elif e["ph"] == "B":
            open_b[e["tid"]].append(e)
        elif e["ph"] == "E":
            check(open_b[e["tid"]], "an E without its B: %r" % e)
            b = open_b[e["tid"]].pop()
            by_tid[e["tid"]].append((b["ts"], e["ts"], b))
    for tid, stack in open_b.items():
        check(not stack, "B events never ended on track %r" % tid)
    for tid, spans in by_tid.items():
        stack = []
        for start, end, e in sorted(spans, key=lambda s: (s[0], -s[1])):
            while stack and stack[-1] <= start + EPS:
                stack.pop()
            check(not stack or end <= stack[-1] + EPS,
                  "spans overlap without nesting on track %r: %r" % (tid, e))
            stack.append(end)
    return by_tid


def of(events, ph, cat):
    return [e for e in events if e["ph"] == ph and e.get("cat") == cat]


def run_at(runs, tid, ts):
    """The run span on track tid that holds ts, or None."""
    for e in runs:
        if e["tid"] == tid and e["ts"] - EPS <= ts <= e["ts"] + e["dur"] + EPS:
            return e
    return None


def check_flows(events):
    """Each flow: one "s" and one "f" of the same id, cat and name; the "s"
    inside the parent's run, where its task was accepted (its queued span
    starts there), the "f" bound to the enclosing slice 1 ns into the
    task's next run (the one its queued span ends at). And each end binds
    to its run in both viewers: chrome://tracing takes the innermost slice
    of non-zero length around the event's ts, Perfetto the slice begun
    last on the track before it (an instant is a slice there, and stays on
    top until the next slice begins), so no other event of the track may
    lie between the run's start and the flow's end. Returns the starts,
    which stand for their ACCEPTED events."""
    runs = of(events, "X", "run")
    queued = of(events, "X", "queued")
    slices = [e for e in events if e["ph"] in ("X", "i")]

    def alone(run, ts):
        return not any(e is not run and e["tid"] == run["tid"] and
                       run["ts"] <= e["ts"] <= ts for e in slices)

    by_id = collections.defaultdict(list)
    for e in events:
        if e["ph"] in ("s", "f"):
            by_id[e["id"]].append(e)
    starts = []
    for fid, evs in by_id.items():
        check(sorted(e["ph"] for e in evs) == ["f", "s"],
              "flow %r: %r, not one start and one end" % (fid, evs))
        s, f = sorted(evs, key=lambda e: e["ph"], reverse=True)
        check(s["cat"] == f["cat"] == "flow" and
              s["name"] == f["name"] == "schedule",
              "flow %r: start and end differ in cat or name" % fid)
        check(f.get("bp") == "e", "flow %r: the end does not bind to its "
              "enclosing slice" % fid)
        task, parent = s["args"]["task"], s["args"]["parent"]
        p = run_at(runs, s["tid"], s["ts"])
        check(p is not None and p["args"]["task"] == parent and
              p["ts"] < s["ts"] < p["ts"] + p["dur"],
              "flow %r of %s starts in no run of %s" % (fid, task, parent))
        check(alone(p, s["ts"]), "flow %r of %s: another slice between its "
              "start and its run's" % (fid, task))
        c = run_at(runs, f["tid"], f["ts"])
        check(c is not None and c["args"]["task"] == task and
              c["ts"] < f["ts"] <= c["ts"] + 0.001 + EPS,
              "flow %r of %s ends 1 ns into no run of it" % (fid, task))
        check(alone(c, f["ts"]), "flow %r of %s: another slice between its "
              "end and its run's start" % (fid, task))
        check(any(q["args"]["task"] == task and abs(q["ts"] - s["ts"]) <= EPS
                  and abs(q["ts"] + q["dur"] - c["ts"]) <= EPS
                  for q in queued),
              "flow %r of %s: no queued span from its start to its run"
              % (fid, task))
        starts.append(s)
    return starts


def test_spans(program, path):
    want, trace = run(program, path)
    check(want["lost"] == 0, "events lost with room for all of them")
    check(trace.get("otherData", {}).get("lost_events") == 0,
          "the trace says events were lost")
    events = check_format(trace)
    check_spans(events)
    flows = check_flows(events)
    accepted = of(events, "i", "accepted") + flows  # a flow's start too
    runs = of(events, "X", "run")
    queued = of(events, "X", "queued")
    handed = of(events, "i", "handed back")
    counts = {"accepted": len(accepted), "runs": len(runs),
              "handed_back": len(handed), "flows": len(flows),
              "cancelled": sum(e["args"]["status"] != "0" for e in handed)}
    for k, v in counts.items():
        check(v == want[k], "%s: %d in the trace, the program counted %d"
              % (k, v, want[k]))
    check(len(queued) == want["accepted"],
          "%d queued spans for %d accepted" % (len(queued), want["accepted"]))
    check(all(e["tid"] >= 100 for e in queued) and
          all(e["tid"] < 100 for e in runs),
          "queued spans on worker tracks, runs on thread tracks")
    check(len({e["tid"] for e in runs}) >= 2, "runs on fewer than 2 threads")

    # Per task (posts have no name of their own): accepted before started,
    # and each queued span that ends in a run ends where the run starts.
    first = {}
    for e in accepted:
        first.setdefault(e["args"]["task"], e["ts"])
    starts = collections.defaultdict(list)
    for e in runs:
        starts[e["args"]["task"]].append(e["ts"])
    for task, ts in starts.items():
        check(task in first, "%s ran but was never accepted" % task)
        if task != "post":
            check(first[task] <= min(ts) + EPS,
                  "%s started at %.3f before it was accepted at %.3f"
                  % (task, min(ts), first[task]))
    for e in queued:
        end = e["ts"] + e["dur"]
        task = e["args"]["task"]
        if e["args"]["outcome"] == "started":
            check(any(abs(end - s) <= EPS for s in starts[task]),
                  "queued span of %s ends at no run's start" % task)
        else:
            check(task not in starts, "%s ran and was handed back unrun"
                  % task)

    # The workload's follow-ups go to other workers than their parents'.
    for s in flows:
        parent = run_at(runs, s["tid"], s["ts"])
        check(parent["args"]["worker"] != s["args"]["worker"],
              "%s scheduled %s on its own worker" % (s["args"]["parent"],
                                                    s["args"]["task"]))
    print("trace-spans: %d accepted, %d runs, %d queued, %d handed back, "
          "%d flows" % (len(accepted), len(runs), len(queued), len(handed),
                        len(flows)))


def test_lost(program, path):
    want, trace = run(program, path, cap=16)
    check(want["lost"] > 0, "no event lost with 16 records per thread")
    check(trace.get("otherData", {}).get("lost_events") == want["lost"],
          "the trace's lost_events is not the count printed")
    events = check_format(trace)
    check_spans(events)
    flows = check_flows(events)
    check(len(of(events, "X", "run")) < want["runs"],
          "every run in the trace although events were lost")
    check(0 < len(flows) < want["flows"],
          "%d of %d flows in the trace" % (len(flows), want["flows"]))
    print("trace-lost: %d events lost, the trace still closes every span "
          "and ends each of its %d flows" % (want["lost"], len(flows)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("name", choices=["spans", "lost"])
    ap.add_argument("--program", required=True)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        try:
            {"spans": test_spans, "lost": test_lost}[a.name](a.program, path)
        except Failure as e:
            print("FAIL: %s" % e)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
