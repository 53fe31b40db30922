"""Every process advisor starts runs where the script runs: the user's working directory, the
script at its own path, in both sandbox modes.

The layout is a research repository's: the script lives in ``src/`` and is run from there, reads
``../configs`` (relative to the working directory and to ``__file__``), imports a helper beside
itself, and appends to ``../result/log_train.txt`` through a handle it never flushes or closes.
A real ``advisor analyze`` runs it (the baseline, its repeat, a trial, the patch's verification),
under the copy-on-write view where the machine allows one and under a kernel that refuses
unshare(2) with EINVAL as gVisor does (tests/no_unshare.py): the Python hooks alone. Each
sandboxed process saw the cwd and ``__file__`` plain python gives; its writes landed in its run
directory; the user's log holds the baseline's lines alone, flushed although advisor stopped it.
The script refuses a run directory that exists, as many trainers do, and builds its inputs once:
every process after the baseline found the tree as the baseline found it (runner/created.py),
the baseline's run directory absent and the inputs it read back there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent

TRAIN = """
import json, os, sys
import torch
from helper import make_model          # beside the script: sys.path[0]

HERE = os.path.dirname(os.path.abspath(__file__))
cfg = json.load(open("../configs/train.json"))                          # relative to the cwd
assert cfg == json.load(open(os.path.join(HERE, "..", "configs", "train.json")))   # and to __file__
exp = os.path.join(HERE, "..", "result", "exp")
if os.path.exists(exp):                           # a trainer that never overwrites a run
    sys.exit(f"{exp} exists: remove it first")
os.makedirs(exp)
if not os.path.exists("../data/inputs.pt"):       # made once, then read back: the script's input
    print("building the inputs", flush=True)
    os.makedirs("../data", exist_ok=True)
    torch.save(torch.randn(16, cfg["width"]), "../data/inputs.pt")
x = torch.load("../data/inputs.pt")
log = open("../result/log_train.txt", "a")        # never flushed, never closed
log.write(f"start {os.getpid()} {os.getcwd()} {os.path.abspath(__file__)}\\n")
model = make_model(cfg["width"])
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(cfg["steps"]):
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    log.write(f"step {os.getpid()} {step}\\n")
torch.save(model.state_dict(), os.path.join(HERE, "..", "result", "model.pt"))
"""

HELPER = """
import torch

def make_model(width):
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
"""


def _lay_out(root: Path, steps: int) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "configs").mkdir()
    (root / "configs" / "train.json").write_text(json.dumps({"width": 32, "steps": steps}))
    (root / "src" / "train.py").write_text(textwrap.dedent(TRAIN))
    (root / "src" / "helper.py").write_text(textwrap.dedent(HELPER))
    return root / "src"


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}


def _overlay_possible() -> bool:
    probe = subprocess.run([sys.executable, str(REPO / "advisor" / "runner" / "jail.py"), "--root", "/tmp",
                            "--", sys.executable, "-c", "import os; print(os.environ['ADVISOR_SANDBOX'])"],
                           capture_output=True, text=True, timeout=60)
    return probe.stdout.strip() == "overlay"


def _starts(log: Path) -> list[list[str]]:
    return [line.split()[1:] for line in log.read_text().splitlines() if line.startswith("start ")]


@pytest.mark.parametrize("sandbox", ["overlay", "python"])
def test_every_process_runs_in_the_users_cwd_with_the_script_at_its_own_path(tmp_path, sandbox):
    if sandbox == "overlay" and not _overlay_possible():
        pytest.skip("this machine allows no user namespace with overlayfs: the Python hooks alone run")
    # what plain python makes of the layout, in a copy of it
    plain = _lay_out(tmp_path / "plain", steps=40)
    subprocess.run([sys.executable, "train.py"], cwd=plain, check=True, timeout=300)
    made_by_python = _files(tmp_path / "plain")

    proj = tmp_path / "proj"
    src = _lay_out(proj, steps=10 ** 6)   # advisor stops it: the log is never closed by the script
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    common = ["--warmup", "2", "--steps", "4", "--min-time", "0", "--profile-steps", "1"]
    runs = {"trials": ["--lookahead", "1", "--fix", "nan-loss"],   # the repeat, a guess, a trial
            "verify": ["--apply", "amp", "--no-trials"]}           # the patch's verification
    docs = {}
    for name, opts in runs.items():
        shutil.rmtree(proj / "result" / "exp", ignore_errors=True)   # as the user would, between runs
        cmd = [sys.executable, "-m", "advisor", "analyze", "--out", str(tmp_path / name), *common, *opts, "train.py"]
        if sandbox == "python":   # the kernel refuses unshare(2), as on gVisor
            cmd = [sys.executable, str(REPO / "tests" / "no_unshare.py"), "--", *cmd]
        r = subprocess.run(cmd, cwd=src, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        docs[name] = json.loads((tmp_path / name / "run.json").read_text())
        assert docs[name]["sandbox"]["kind"] == sandbox
    if sandbox == "python":
        repeat = json.loads((tmp_path / "trials" / "trials" / "00-baseline-repeat" / "child.json").read_text())
        assert "Invalid argument" in repeat["sandbox"]["why"]

    # every process reached its steps: none failed on a path
    trials = {t["name"]: t for t in docs["trials"]["trials"]}
    assert {"00-baseline-repeat", "01-nan-loss"} <= set(trials), sorted(trials)
    for name in ("00-baseline-repeat", "01-nan-loss"):
        assert trials[name].get("status") in ("reference", "rejected", "accepted"), trials[name]
        assert trials[name].get("samples_per_s"), trials[name]
    verification = docs["verify"]["patch"]["verification"]
    assert verification["runs"] >= 1 and verification["status"] != "failed", verification

    # the user's log: the two baselines' lines alone, flushed at advisor's stop
    log = proj / "result" / "log_train.txt"
    baselines = {s[0] for s in _starts(log)}
    assert len(_starts(log)) == 2 == len(baselines), log.read_text()[:500]
    steps = [line for line in log.read_text().splitlines() if line.startswith("step ")]
    assert {line.split()[1] for line in steps} == baselines

    # each sandboxed process started where plain python starts, and wrote into its run directory
    redirected_log = Path(str(log.resolve()).lstrip("/"))
    for where in ("trials/trials/00-baseline-repeat", "trials/trials/01-nan-loss", "verify/verify/run-1"):
        copy = tmp_path / where / "outputs" / redirected_log
        assert copy.is_file(), f"{where} wrote no log into its run directory"
        own = [s for s in _starts(copy) if s[0] not in baselines]
        assert own and own[-1][1:] == [str(src.resolve()), str((src / "train.py").resolve())], (where, own)
        assert "building the inputs" not in (tmp_path / where / "stdout.txt").read_text(), where
    hidden = json.loads((tmp_path / "trials/trials/00-baseline-repeat/child.json").read_text())["sandbox"]["hidden"]
    assert str((proj / "result").resolve()) in hidden and not any("data" in Path(p).parts for p in hidden), hidden

    # nothing in the user's tree that plain python would not have made
    assert _files(proj) - made_by_python == set(), sorted(_files(proj) - made_by_python)
