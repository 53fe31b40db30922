#!/usr/bin/env python3
"""Synthesize a large, realistic Kineto trace by repeating the steps of a real one.

Each copy of the source's events is shifted in time by the source's span and gets fresh
correlation / External ids and ProfilerStep numbers, so the result parses like a long profile of
the same training loop (same kernel names, same phase ranges, same launch links).

    python3 benchmarks/make_large_trace.py --size-mb 1024 --out /tmp/big.pt.trace.json
    python3 benchmarks/make_large_trace.py --size-mb 200 --out /tmp/b.pt.trace.json.gz

Layouts: ``line`` (default) writes one event per line, the layout Kineto's exporter is usually
described with; ``pretty`` writes one key per line as torch 2.x's ``export_chrome_trace`` does
(same bytes, ~1.6x fewer events per GB).
"""
from __future__ import annotations

import argparse
import gzip
import os
import re
import sys

import orjson

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SOURCE = os.path.join(HERE, "..", "tests", "fixtures", "traces",
                              "full_amp_bf16_channels_last.pt.trace.json.gz")
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def load(path: str) -> dict:
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        return orjson.loads(f.read())


def _shifter(events: list[dict]):
    """Return (span_us, max_corr, max_ext, n_steps) of the source events."""
    ts = [float(e["ts"]) for e in events if e.get("ph") != "M" and "ts" in e]
    ends = [float(e["ts"]) + float(e.get("dur", 0)) for e in events if e.get("ph") != "M" and "ts" in e]
    corr = [int((e.get("args") or {}).get("correlation", 0)) for e in events]
    ext = [int((e.get("args") or {}).get("External id", 0)) for e in events]
    steps = [e for e in events if _STEP.match(str(e.get("name", "")))
             and e.get("cat") == "user_annotation"]
    return max(ends) - min(ts), max(corr + [0]), max(ext + [0]), max(len(steps), 1)


def copy_event(e: dict, k: int, dt: float, dcorr: int, dext: int, nsteps: int) -> dict:
    e = dict(e)
    if "ts" in e and not isinstance(e["ts"], str):
        e["ts"] = round(float(e["ts"]) + k * dt, 3)
    a = e.get("args")
    if a:
        a = dict(a)
        if "correlation" in a:
            a["correlation"] = int(a["correlation"]) + k * dcorr
        if "External id" in a:
            a["External id"] = int(a["External id"]) + k * dext
        e["args"] = a
    if e.get("cat") == "ac2g" and "id" in e:
        e["id"] = int(e["id"]) + k * dcorr
    m = _STEP.match(str(e.get("name", "")))
    if m:
        e["name"] = f"ProfilerStep#{k * nsteps + int(m.group(1))}"
    return e


def _pretty(e: dict) -> bytes:
    body = orjson.dumps(e, option=orjson.OPT_INDENT_2).decode()
    return ("  " + body.replace("\n", "\n  ")).encode()


def write(src: dict, out: str, size_mb: float, layout: str) -> dict:
    events = src["traceEvents"]
    meta_ev = [e for e in events if e.get("ph") == "M"]
    body = [e for e in events if e.get("ph") != "M"]
    span, max_corr, max_ext, nsteps = _shifter(body)
    dt = span * 1.02  # a small gap between copies, as between profiled steps
    head = {k: v for k, v in src.items() if k not in ("traceEvents", "traceName", "advisor_trimmed")}
    target = int(size_mb * (1 << 20))
    enc = _pretty if layout == "pretty" else orjson.dumps
    opener = gzip.open if out.endswith(".gz") else open
    written, copies, n_events = 0, 0, 0
    with opener(out, "wb") as f:
        h = orjson.dumps(head, option=orjson.OPT_INDENT_2)[:-2] + b',\n  "traceEvents": [\n'
        f.write(h)
        first = True
        for e in meta_ev:
            f.write((b"" if first else b",\n") + enc(e))
            first = False
        while written < target:
            chunk = b",\n".join(enc(copy_event(e, copies, dt, max_corr + 1, max_ext + 1, nsteps))
                                for e in body)
            f.write(b",\n" + chunk)
            written += len(chunk) + 2
            copies += 1
            n_events += len(body)
        f.write(b'\n  ],\n  "traceName": "' + os.path.basename(out).encode() + b'"\n}\n')
    return {"copies": copies, "events": n_events + len(meta_ev), "steps": copies * nsteps,
            "json_bytes": written + len(h)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default=DEFAULT_SOURCE, help="a real Kineto trace to repeat")
    ap.add_argument("--size-mb", type=float, default=1024.0, help="target JSON size (uncompressed)")
    ap.add_argument("--out", required=True, help=".json or .json.gz")
    ap.add_argument("--layout", choices=("line", "pretty"), default="line")
    args = ap.parse_args(argv)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    stats = write(load(args.source), args.out, args.size_mb, args.layout)
    stats["file_bytes"] = os.path.getsize(args.out)
    print(orjson.dumps(stats).decode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
