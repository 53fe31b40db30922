"""Start-up of a process started fresh against one started ahead (runner.ahead.WarmChild: python
and torch imported while the previous process runs, then it waits for its spec). Prints, for
each, the seconds from its spawn (or, started ahead, its go) to each start-up milestone the
child noted (advisor.measure.startup_s): install (python and torch up, advisor's hooks in),
script (its first line), first_step.

    python3 benchmarks/warm_start.py [--repeats 3] [--script PATH]

The process started ahead is made while the fresh one runs, as trials do, and handed its
spec once torch is loaded in it. (This was tests/test_runner_training.py's "install is
shorter started ahead": a figure, not something a test on a busy machine can assert; the
test keeps what is behaviour: torch loaded before the go, the script run in that process.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from advisor.measure import startup_s  # noqa: E402
from advisor.runner.ahead import WarmChild  # noqa: E402
from advisor.runner.parent import run_child  # noqa: E402

TINY = """
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for i in range(10000):
    model(torch.randn(8, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def _torch_loaded(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "libtorch_python" in f.read()
    except OSError:
        return False


def _spec(script: str, cwd: str, run_dir: str) -> dict:
    return {"script": os.path.abspath(script), "argv": [os.path.basename(script)], "cwd": cwd, "run_dir": run_dir,
            "run_name": "baseline", "warmup_steps": 2, "profile_steps": 0, "measure_steps": 3, "measure_min_s": 0,
            "record_memory": False, "with_stack": False, "interventions": []}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--script", default=None, help="a training script (default: a tiny CPU loop)")
    args = p.parse_args()

    phases: dict[str, list[dict]] = {"fresh": [], "ahead": []}
    with tempfile.TemporaryDirectory() as tmp:
        script = args.script or os.path.join(tmp, "tiny.py")
        if not args.script:
            Path(script).write_text(textwrap.dedent(TINY))
        cwd = os.path.dirname(os.path.abspath(script))
        for i in range(args.repeats):
            ahead = WarmChild(cwd)  # imports torch while the fresh process runs
            fresh = run_child(_spec(script, cwd, os.path.join(tmp, f"fresh{i}")), timeout=600, step_timeout=300)
            while not _torch_loaded(ahead.proc.pid) and ahead.proc.poll() is None:
                time.sleep(0.05)
            warm = run_child(_spec(script, cwd, os.path.join(tmp, f"ahead{i}")), timeout=600, step_timeout=300,
                             warm=ahead)
            for name, res in (("fresh", fresh), ("ahead", warm)):
                if res["status"] != "complete":
                    print(f"{name} run {i + 1}: {'; '.join(res['incomplete_reasons'])}", file=sys.stderr)
                    return 1
                phases[name].append(startup_s(res))
            print(f"run {i + 1}: fresh {phases['fresh'][-1]}   started ahead {phases['ahead'][-1]} "
                  f"(started_warm={warm['started_warm']})", flush=True)
    print(f"median seconds over {args.repeats} runs (from the spawn, or the go):")
    for key in ("install", "script", "first_step"):
        row = {name: statistics.median(ph[key] for ph in runs) for name, runs in phases.items()}
        print(f"  {key:<10} fresh {row['fresh']:7.3f}   started ahead {row['ahead']:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
