#!/usr/bin/env python3
"""Time advisor's trace load + analysis against HolisticTraceAnalysis's load of the same trace.

Each measurement runs in a fresh subprocess, which reports its own wall time and peak RSS
(resource.getrusage: the process and any children it waited for). Traces are synthesized with
make_large_trace.py from a real H200 fixture.

    python3 benchmarks/ingest_vs_hta.py --sizes 10,100,1024 --hta-max-mb 200
    python3 benchmarks/ingest_vs_hta.py --hta-python /path/to/venv/bin/python   # HTA elsewhere

HTA: ``pip install HolisticTraceAnalysis`` (it pins its own pandas/numpy, so a virtualenv is
kinder); if it cannot be imported the table says why and advisor's figures are still printed.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import make_large_trace  # noqa: E402

_RUSAGE = """
import json, resource, sys, time
def _cpu_s():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def _peak_mb():
    me = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return max(me, kids) / 1024.0
"""

ADVISOR = _RUSAGE + textwrap.dedent("""
    sys.path.insert(0, {root!r})
    t0 = time.perf_counter()
    from advisor.trace import load_trace
    from advisor.metrics import analyze
    t1, c1 = time.perf_counter(), _cpu_s()
    m = load_trace({path!r})
    t2 = time.perf_counter()
    a = analyze(m)
    t3 = time.perf_counter()
    print(json.dumps({{"import_s": t1 - t0, "load_s": t2 - t1, "analyze_s": t3 - t2,
                      "total_s": t3 - t1, "cpu_s": _cpu_s() - c1, "peak_rss_mb": _peak_mb(),
                      "steps": len(m.steps),
                      "kernels": len(m.kernels), "cpu_events": len(m.cpu),
                      "step_time_ms": a["step_time_ms"]}}))
""")

HTA = _RUSAGE + textwrap.dedent("""
    import logging
    logging.disable(logging.CRITICAL)
    t0 = time.perf_counter()
    from hta.trace_analysis import TraceAnalysis
    t1, c1 = time.perf_counter(), _cpu_s()
    ta = TraceAnalysis(trace_dir={dir!r})
    t2 = time.perf_counter()
    df = ta.t.get_trace(next(iter(ta.t.get_all_traces())))
    print(json.dumps({{"import_s": t1 - t0, "load_s": t2 - t1, "total_s": t2 - t1,
                      "cpu_s": _cpu_s() - c1, "peak_rss_mb": _peak_mb(), "rows": int(len(df))}}))
""")


def run(python: str, code: str, timeout: float) -> dict:
    """Run code in a fresh interpreter; its last stdout line is a JSON result."""
    t = time.perf_counter()
    try:
        p = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=timeout,
                           cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    wall = time.perf_counter() - t
    lines = [ln for ln in p.stdout.strip().splitlines() if ln.startswith("{")]
    if p.returncode != 0 or not lines:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or [f"exit {p.returncode}"]
        return {"error": tail[0][:160]}
    out = json.loads(lines[-1])
    out["process_wall_s"] = wall
    return out


def make(size_mb: float, workdir: str, source: str, layout: str) -> tuple[str, dict]:
    d = os.path.join(workdir, f"{size_mb:g}mb")
    path = os.path.join(d, "host_0.1.pt.trace.json")
    stamp = d + ".stats.json"  # outside the trace dir: HTA reads every *.json there
    if os.path.exists(path) and os.path.exists(stamp):
        return path, json.load(open(stamp))
    os.makedirs(d, exist_ok=True)
    stats = make_large_trace.write(make_large_trace.load(source), path, size_mb, layout)
    stats["file_bytes"] = os.path.getsize(path)
    json.dump(stats, open(stamp, "w"))
    return path, stats


def gzipped(path: str) -> str:
    """A gzip copy beside the trace directory (HTA must not see it), made once."""
    out = os.path.dirname(path) + ".pt.trace.json.gz"
    if not os.path.exists(out):
        with open(path, "rb") as src, gzip.open(out + ".tmp", "wb", compresslevel=6) as dst:
            shutil.copyfileobj(src, dst, 16 << 20)
        os.replace(out + ".tmp", out)
    return out


def fmt(r: dict | None, key: str, spec: str) -> str:
    if r is None:
        return "-"
    if "error" in r:
        return "error"
    return format(r[key], spec)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="10,100,1024", help="trace sizes in MB (JSON bytes)")
    ap.add_argument("--hta-max-mb", type=float, default=200.0,
                    help="skip HTA above this size (its json.load + pandas needs ~10-20x RAM)")
    ap.add_argument("--hta-python", default=sys.executable, help="interpreter with HTA installed")
    ap.add_argument("--workdir", default="/tmp/advisor-bench")
    ap.add_argument("--source", default=make_large_trace.DEFAULT_SOURCE)
    ap.add_argument("--layout", choices=("line", "pretty"), default="line")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--gzip", action="store_true",
                    help="also time advisor on a gzipped copy of each trace (streams too)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)

    rows = []
    for size in [float(s) for s in args.sizes.split(",")]:
        path, stats = make(size, args.workdir, args.source, args.layout)
        adv = run(sys.executable, ADVISOR.format(root=ROOT, path=path), args.timeout)
        hta = None
        if size <= args.hta_max_mb:
            hta = run(args.hta_python, HTA.format(dir=os.path.dirname(path)), args.timeout)
        gz = None
        if args.gzip:
            gz = run(sys.executable, ADVISOR.format(root=ROOT, path=gzipped(path)), args.timeout)
        rows.append({"size_mb": stats["file_bytes"] / 2**20, "events": stats["events"],
                     "steps": stats["steps"], "advisor": adv, "hta": hta, "advisor_gz": gz})
        print(f"[{size:g} MB] advisor {adv}  HTA {hta}", file=sys.stderr, flush=True)

    load = os.getloadavg()[0]
    print(f"\nload average after the run: {load:.2f} (other jobs on the box inflate wall times; "
          f"CPU s is the process's own user+sys time)")
    print(f"cpu_count={os.cpu_count()}  python={sys.version.split()[0]}  layout={args.layout}  "
          f"source={os.path.basename(args.source)}")
    head = (f"{'trace MB':>9} {'events':>10} {'advisor s':>10} {'(load':>7} {'analyze)':>9} "
            f"{'adv CPU s':>9} {'adv RSS MB':>10} {'HTA load s':>10} {'HTA CPU s':>9} "
            f"{'HTA RSS MB':>10} {'speedup':>8}")
    print(head)
    print("-" * len(head))
    for r in rows:
        a, h = r["advisor"], r["hta"]
        speed = "-"
        if h and "error" not in h and "error" not in a:
            speed = f"{h['total_s'] / a['total_s']:.1f}x"
        print(f"{r['size_mb']:9.0f} {r['events']:10d} {fmt(a, 'total_s', '10.2f')} "
              f"{fmt(a, 'load_s', '7.2f')} {fmt(a, 'analyze_s', '9.2f')} "
              f"{fmt(a, 'cpu_s', '9.2f')} {fmt(a, 'peak_rss_mb', '10.0f')} "
              f"{fmt(h, 'total_s', '10.2f')} {fmt(h, 'cpu_s', '9.2f')} "
              f"{fmt(h, 'peak_rss_mb', '10.0f')} {speed:>8}")
    if args.gzip:
        print("\nsame traces gzipped (advisor streams the gzip; HTA not run):")
        for r in rows:
            g = r["advisor_gz"]
            print(f"{r['size_mb']:9.0f} MB json -> gz: advisor {fmt(g, 'total_s', '.2f')} s, "
                  f"(CPU {fmt(g, 'cpu_s', '.2f')} s), peak RSS {fmt(g, 'peak_rss_mb', '.0f')} MB")
    for r in rows:
        for who in ("advisor", "hta", "advisor_gz"):
            if r[who] and "error" in r[who]:
                print(f"{r['size_mb']:.0f} MB {who}: {r[who]['error']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
