"""Helpers shared by the runner tests (real processes, real torch, CPU)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

from advisor.runner.parent import GRACE_S, run_child  # noqa: E402


def write(path, text: str) -> str:
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(textwrap.dedent(text).lstrip("\n"))
    return path


def spec_for(script: str, argv: list[str], cwd: str, run_dir: str, **kw) -> dict:
    spec = {"script": os.path.abspath(script), "argv": argv, "cwd": cwd, "run_dir": run_dir,
            "run_name": "baseline", "warmup_steps": 2, "profile_steps": 2, "measure_steps": 5,
            "record_memory": True, "with_stack": False, "interventions": []}
    spec.update(kw)
    return spec


def run_plain(argv: list[str], cwd: str, timeout: float = 60):
    """`python3 <argv>` in cwd: (returncode, stdout, stderr)."""
    p = subprocess.run([sys.executable, *argv], cwd=cwd, capture_output=True, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr


# The first step's deadline for a script under torch.compile: a guard against a hang, not a
# bound. torch.compile on a busy 2-core CPU has taken over 30 s (run_advised's default) to
# reach it ("never reached a training step within 30 s").
STEP_GUARD = 240
# How long a test waits for a process to reach a state (held, gone): a guard against a hang,
# not a bound; nothing is timed by it.
WAIT_GUARD_S = 300


def wait_until(done, what: str, guard_s: float = WAIT_GUARD_S) -> None:
    """Poll done() until it is true; fail naming `what` only if it never is within guard_s."""
    import time

    deadline = time.monotonic() + guard_s
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within the {guard_s:g} s guard")
        time.sleep(0.1)


def run_advised(capfd, script, argv, cwd, run_dir, *, timeout=60, step_timeout=30, grace=5.0, **kw):
    """run_child with the child's stdout/stderr captured at the fd level:
    (result, stdout, stderr, progress records)."""
    capfd.readouterr()
    progress = []
    res = run_child(spec_for(script, argv, cwd, run_dir, **kw), timeout=timeout,
                    step_timeout=step_timeout, grace=grace,
                    on_progress=lambda stage, step, info: progress.append((stage, step)))
    out, err = capfd.readouterr()
    return res, out, err, progress


# A tiny but real training loop; LOOP_BODY_HOOK lets a test inject behaviour at a given step.
TRAIN = """
import os, sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed(0)
torch.set_float32_matmul_precision("high")
torch.backends.cudnn.benchmark = True
ds = TensorDataset(torch.randn(256, 8), torch.randn(256, 1))
loader = DataLoader(ds, batch_size=8, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
scaler = torch.amp.GradScaler("cpu", enabled=False)
it = 0
for epoch in range(EPOCHS):
    for x, y in loader:
        it += 1
        HOOK
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
            out = model(x)
        loss = torch.nn.functional.mse_loss(out.float(), y)
        loss.backward()
        opt.step()
print("finished all epochs", it)
"""


def train_script(path, epochs: int = 1000, hook: str = "pass") -> str:
    return write(path, TRAIN.replace("EPOCHS", str(epochs)).replace("HOOK", hook))


def line_of(path: str, needle: str) -> int:
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if needle in line:
                return i
    raise AssertionError(f"{needle!r} not in {path}")



_DRIVER = """
import json, sys
sys.path.insert(0, sys.argv[2])
from advisor.runner.parent import run_child
a = json.load(open(sys.argv[1]))
progress = []
r = run_child(a["spec"], timeout=a["timeout"], step_timeout=a["step_timeout"], grace=a["grace"],
              on_progress=lambda s, n, i: progress.append([s, n]), stall_timeout=a.get("stall_timeout"))
r["_progress"] = progress
json.dump(r, open(a["out"], "w"))
"""


def run_many(jobs: dict, workdir, workers: int = 4) -> dict:
    """Run several run_child jobs at once, each in its own driver process (so its child's
    stdout/stderr land in their own files). jobs: name -> dict(script, argv, cwd, run_dir,
    timeout=60, step_timeout=30, grace=GRACE_S, **spec overrides). Returns name -> (result, out, err)."""
    import json
    from concurrent.futures import ThreadPoolExecutor

    workdir = str(workdir)
    os.makedirs(workdir, exist_ok=True)

    def one(name, job):
        job = dict(job)
        opts = {k: job.pop(k) for k in ("timeout", "step_timeout", "grace", "stall_timeout") if k in job}
        spec = spec_for(job.pop("script"), job.pop("argv"), job.pop("cwd"), job.pop("run_dir"), **job)
        base = os.path.join(workdir, name)
        arg = {"spec": spec, "out": base + ".result.json", "timeout": opts.get("timeout", 60),
               "step_timeout": opts.get("step_timeout", 30), "grace": opts.get("grace", GRACE_S),
               "stall_timeout": opts.get("stall_timeout")}
        with open(base + ".job.json", "w") as f:
            json.dump(arg, f)
        with open(base + ".out", "w") as fo, open(base + ".err", "w") as fe:
            p = subprocess.run([sys.executable, "-c", _DRIVER, base + ".job.json", REPO],
                               stdout=fo, stderr=fe, timeout=180)
        out, err = open(base + ".out").read(), open(base + ".err").read()
        assert p.returncode == 0, f"driver failed for {name}: {err[-2000:]}"
        with open(base + ".result.json") as f:
            return json.load(f), out, err

    with ThreadPoolExecutor(workers) as ex:
        futs = {name: ex.submit(one, name, job) for name, job in jobs.items()}
        return {name: f.result() for name, f in futs.items()}
