#!/usr/bin/env python3
"""check_trace.py: checks a Chrome trace event file (dpbench train --trace, dpbench-micro
--dpb_trace; written by src/core/trace_json.cpp) before anyone opens it in Perfetto.

  scripts/check_trace.py run.json --ranks 2                      # host, compute and comm tracks
  scripts/check_trace.py micro.json --ranks 2 --tracks comm --expect-name all-reduce

Checks: the file parses (the JSON object form, or the bare array the format also allows); every
"B" has its "E" on the same pid/tid, in order; every "X" has a ts and a dur >= 0; the ranks (the
processes named "rank <r>..." by process_name metadata) are exactly 0..N-1 with --ranks N (any
number otherwise, at least one); on every rank each track of --tracks (default host,compute,comm)
has a thread_name (its first word the track: "host", "compute stream", "comm stream") and at least
one span; with --expect-name NAME (repeatable), every rank has a span of that name.
Prints one summary line (ranks, spans per track, time range) and exits 0; exits 1 with a line
naming what is wrong; 2 on unusable input (a missing file, not JSON, a bad option).
Python 3 standard library only.
"""
import argparse
import json
import re
import sys

TRACKS = ("host", "compute", "comm")
RANK_NAME = re.compile(r"^rank (\d+)\b")


class Bad(Exception):
    """The trace is wrong (exit 1)."""


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        print(f"check_trace: cannot read {path}: {e.strerror}", file=sys.stderr)
        sys.exit(2)
    except (ValueError, UnicodeDecodeError) as e:
        print(f"check_trace: {path}: not JSON: {e}", file=sys.stderr)
        sys.exit(2)
    if isinstance(doc, list):
        return doc
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise Bad("no traceEvents list (neither the object nor the array form of the format)")
    return doc["traceEvents"]


def number(e, key, i):
    v = e.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Bad(f"event {i} ({e.get('ph')} {e.get('name')!r}): {key} is {v!r}, not a number")
    return v


def check(events, want_ranks, want_tracks, expect_names):
    procs = {}        # pid -> rank
    threads = {}      # (pid, tid) -> track ("" when the name is no track of ours)
    spans = []        # (pid, tid, name, ts, end)
    open_b = {}       # (pid, tid) -> [(name, ts, index)]
    for i, e in enumerate(events):
        if not isinstance(e, dict) or "ph" not in e:
            raise Bad(f"event {i} is not an event object with a 'ph': {str(e)[:80]}")
        ph, key = e["ph"], (e.get("pid"), e.get("tid"))
        if ph == "M":
            name = (e.get("args") or {}).get("name")
            if e.get("name") == "process_name":
                m = RANK_NAME.match(str(name))
                if not m:
                    raise Bad(f"event {i}: process {e.get('pid')} is named {name!r}, not 'rank <r>...'")
                procs[e.get("pid")] = int(m.group(1))
            elif e.get("name") == "thread_name":
                first = str(name).split(" ")[0]
                threads[key] = first if first in TRACKS else ""
        elif ph == "X":
            ts, dur = number(e, "ts", i), number(e, "dur", i)
            if dur < 0:
                raise Bad(f"event {i} (X {e.get('name')!r}, pid {key[0]} tid {key[1]}): dur {dur} < 0")
            spans.append((key[0], key[1], e.get("name"), ts, ts + dur))
        elif ph == "B":
            open_b.setdefault(key, []).append((e.get("name"), number(e, "ts", i), i))
        elif ph == "E":
            stack = open_b.get(key)
            if not stack:
                raise Bad(f"event {i}: an E ({e.get('name')!r}) on pid {key[0]} tid {key[1]} with no open B")
            name, ts, _ = stack.pop()
            end = number(e, "ts", i)
            if end < ts:
                raise Bad(f"event {i}: E of {name!r} on pid {key[0]} tid {key[1]} at {end} before its B at {ts}")
            spans.append((key[0], key[1], name, ts, end))
    for key, stack in open_b.items():
        if stack:
            name, ts, i = stack[-1]
            raise Bad(f"event {i}: the B of {name!r} on pid {key[0]} tid {key[1]} (ts {ts}) has no E")

    ranks = sorted(set(procs.values()))
    if not ranks:
        raise Bad("no process is named 'rank <r>' (process_name metadata)")
    if len(ranks) != len(procs):
        raise Bad(f"two processes are named as the same rank: {procs}")
    if want_ranks is not None:
        missing = [r for r in range(want_ranks) if r not in ranks]
        extra = [r for r in ranks if r >= want_ranks]
        if missing:
            raise Bad(f"rank {missing[0]} has no process (process_name 'rank {missing[0]}...'); "
                      f"expected ranks 0..{want_ranks - 1}, found {ranks}")
        if extra:
            raise Bad(f"rank {extra[0]} is present; expected ranks 0..{want_ranks - 1} only")
    rank_of = procs
    count = {}        # (rank, track) -> spans
    names = {}        # rank -> span names
    for pid, tid, name, ts, end in spans:
        if pid not in rank_of:
            raise Bad(f"a span ({name!r}) on pid {pid}, which has no process_name")
        track = threads.get((pid, tid))
        if track is None:
            raise Bad(f"a span ({name!r}) on pid {pid} tid {tid}, which has no thread_name")
        count[(rank_of[pid], track)] = count.get((rank_of[pid], track), 0) + 1
        names.setdefault(rank_of[pid], set()).add(name)
    for r in ranks:
        for t in want_tracks:
            if not any(track == t and rank_of[pid] == r for (pid, _), track in threads.items()):
                raise Bad(f"rank {r} has no {t} track (thread_name '{t}...')")
            if count.get((r, t), 0) == 0:
                raise Bad(f"rank {r}'s {t} track has no spans")
        for n in expect_names:
            if n not in names.get(r, set()):
                raise Bad(f"rank {r} has no span named {n!r}")
    per_track = {t: sum(c for (r, tr), c in count.items() if tr == t) for t in TRACKS}
    t0 = min((s[3] for s in spans), default=0.0)
    t1 = max((s[4] for s in spans), default=0.0)
    return ranks, per_track, len(spans), t0, t1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace", help="the trace file (JSON)")
    ap.add_argument("--ranks", type=int, help="expect exactly ranks 0..N-1")
    ap.add_argument("--tracks", default=",".join(TRACKS),
                    help="tracks every rank must have, with spans (default host,compute,comm)")
    ap.add_argument("--expect-name", action="append", default=[], metavar="NAME",
                    help="a span name every rank must have (repeatable)")
    args = ap.parse_args()  # exits 2 on a bad option
    tracks = [t for t in args.tracks.split(",") if t]
    unknown = [t for t in tracks if t not in TRACKS]
    if unknown:
        ap.error(f"--tracks: unknown track {unknown[0]!r} (known: {', '.join(TRACKS)})")
    if args.ranks is not None and args.ranks < 1:
        ap.error(f"--ranks: must be at least 1, got {args.ranks}")
    try:
        events = load(args.trace)
        ranks, per_track, n, t0, t1 = check(events, args.ranks, tracks, args.expect_name)
    except Bad as e:
        print(f"check_trace: {args.trace}: {e}", file=sys.stderr)
        return 1
    spans = ", ".join(f"{t} {per_track[t]}" for t in TRACKS)
    print(f"check_trace: {args.trace}: OK: {len(ranks)} ranks, {n} spans ({spans}), "
          f"{t0 / 1e3:.3f} to {t1 / 1e3:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
