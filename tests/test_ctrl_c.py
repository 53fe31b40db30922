"""Ctrl-C during `advisor analyze` is not success (issue 27): the first press stops the trials
and keeps every verdict reached, writes fixes.patch unverified, marks run.json "interrupted" and
exits 130, with no traceback of the trial it stopped; a second press stops at once. `advisor
report` and `advisor compare` read such a run. CPU only: examples/slow_loader.py's trials."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SLOW = REPO / "examples" / "slow_loader.py"
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
WAIT_S = 400  # only so that a broken run cannot hang the suite; nothing is timed


def _start(tmp: Path, *options: str) -> tuple[subprocess.Popen, Path]:
    shutil.copy(SLOW, tmp / "slow_loader.py")
    err = tmp / "stderr.txt"
    with open(err, "wb") as f:
        p = subprocess.Popen([sys.executable, "-m", "advisor", "analyze", "--out", str(tmp / "run"), "--warmup", "2",
                              "--steps", "8", "--min-time", "0", "--profile-steps", "1", *options,
                              "slow_loader.py", "--sleep-ms", "4"],
                             cwd=tmp, env=ENV, stdout=subprocess.DEVNULL, stderr=f)
    return p, err


def _wait_for(p: subprocess.Popen, err: Path, text: str) -> None:
    """Until advisor's stderr shows `text` (a progress line)."""
    deadline = time.monotonic() + WAIT_S
    while text not in err.read_text(errors="replace"):
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            pytest.fail(f"advisor ended ({p.returncode}) or hung before {text!r}:\n"
                        + err.read_text(errors="replace")[-3000:])
        time.sleep(0.2)


def _doc(tmp: Path) -> dict:
    return json.loads((tmp / "run" / "run.json").read_text())


def _advisor(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "advisor", *map(str, args)], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=WAIT_S)


def test_ctrl_c_during_the_trials_keeps_what_finished_and_exits_130(tmp_path):
    p, err = _start(tmp_path, "--fix", "dataloader-workers,nan-loss")
    _wait_for(p, err, "advisor ▸ trial 02-")   # trial 01 has run and been judged; 02 runs
    time.sleep(1.0)
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=WAIT_S) == 130
    stderr = err.read_text(errors="replace")
    assert "Traceback" not in stderr, stderr[-3000:]   # the trial it stopped printed none
    assert "Ctrl-C: stopping" in stderr
    doc = _doc(tmp_path)
    assert doc["status"] == "interrupted", doc["incomplete_reasons"]
    assert doc["interrupted_during"] in ("trials", "verification")
    assert any("Ctrl-C" in r for r in doc["incomplete_reasons"])
    assert doc["trial_summary"]["interrupted"] is True
    first = next(t for t in doc["trials"] if t["name"].startswith("01-"))
    assert first["status"] in ("accepted", "rejected", "unsure", "superseded") and "%" in first["reason"], first
    if first["status"] == "accepted":   # kept before Ctrl-C: in the patch, which was not verified
        assert doc["trial_summary"]["stack"] and (tmp_path / "run" / "fixes.patch").is_file()
        assert doc["patch"]["verification"]["status"] == "skipped"
        assert doc["patch"]["verification"]["reason"] == "interrupted (Ctrl-C)"
    page = (tmp_path / "run" / "index.html").read_text()
    assert "Interrupted (Ctrl-C)" in page and "Run interrupted (Ctrl-C)" in page
    # `advisor report` re-renders it; `compare` takes its baseline, which was measured in full
    r = _advisor("report", tmp_path / "run", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "Interrupted (Ctrl-C)" in (tmp_path / "run" / "index.html").read_text()
    r = _advisor("compare", tmp_path / "run", tmp_path / "run", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["ratio"] == pytest.approx(1.0)


# A script slow to stop: a KeyboardInterrupt costs it a minute (a checkpoint written on the way
# out, say), so after the first Ctrl-C advisor would wait out its grace period for it.
SLOW_TO_STOP = """
import time
import torch

model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
try:
    for step in range(10000):
        loss = model(torch.randn(16, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        time.sleep(0.3)
except KeyboardInterrupt:
    time.sleep(60)
"""


def test_a_second_ctrl_c_stops_at_once_with_exit_130(tmp_path):
    (tmp_path / "slow_to_stop.py").write_text(SLOW_TO_STOP)
    err = tmp_path / "stderr.txt"
    with open(err, "wb") as f:
        p = subprocess.Popen([sys.executable, "-m", "advisor", "analyze", "--out", str(tmp_path / "run"),
                              "--warmup", "2", "--steps", "8", "--min-time", "0", "--profile-steps", "1",
                              "--fix", "nan-loss", "slow_to_stop.py"],
                             cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=f)
    _wait_for(p, err, "advisor ▸ trial 01-")   # run.json holds the baseline; the trial starts
    progress = tmp_path / "run" / "trials" / "01-nan-loss" / "progress.jsonl"
    deadline = time.monotonic() + WAIT_S
    while '"warmup"' not in (progress.read_text() if progress.exists() else ""):  # the script steps
        assert p.poll() is None and time.monotonic() < deadline, err.read_text(errors="replace")[-3000:]
        time.sleep(0.2)
    p.send_signal(signal.SIGINT)   # the trial catches it and takes its minute
    time.sleep(0.5)   # two presses, not one: signals sent together can arrive as one
    p.send_signal(signal.SIGINT)
    # at once: the second press's own reason, not the script's minute or the grace period
    # waited out (a guard only: how long it took is not asserted)
    assert p.wait(timeout=WAIT_S) == 130
    stderr = err.read_text(errors="replace")
    assert "stopped (Ctrl-C twice)" in stderr, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    doc = _doc(tmp_path)
    assert doc["status"] == "interrupted" and doc["interrupted_during"] == "trials", doc["incomplete_reasons"]
    assert any(r.startswith("stopped at once by a second Ctrl-C") for r in doc["incomplete_reasons"])


def test_ctrl_c_during_the_baseline_is_interrupted_and_exits_130(tmp_path):
    p, err = _start(tmp_path, "--no-trials")
    _wait_for(p, err, "measuring without the profiler")
    p.send_signal(signal.SIGINT)
    assert p.wait(timeout=WAIT_S) == 130
    doc = _doc(tmp_path)
    assert doc["status"] == "interrupted" and doc["interrupted_during"] == "baseline"
    assert any(r.startswith("interrupted (Ctrl-C)") for r in doc["incomplete_reasons"])
    assert "Interrupted (Ctrl-C) while the baseline ran" in (tmp_path / "run" / "index.html").read_text()
    # its baseline was cut short: it is no measurement to compare
    r = _advisor("compare", tmp_path / "run", tmp_path / "run", "--json", cwd=tmp_path)
    assert r.returncode == 1 and "is not a complete run (status 'interrupted'" in r.stderr


ORPHANED = """
import os
import time

import torch

log = open("log.txt", "a")                      # appended, never flushed: a normal exit flushes it
open("pid.txt", "w").write(str(os.getpid()))
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
try:
    for i in range(200):
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        log.write(f"step {i}\\n")
        time.sleep(0.3)
finally:
    log.write("finally\\n")
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:   # a zombie (reaped by nobody yet) has ended
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def test_a_baseline_whose_advisor_was_killed_stops_as_advisor_would_and_keeps_its_writes(tmp_path):
    """advisor SIGKILLed (the OOM killer, a job's hard stop) while its baseline runs: the script
    is stopped as advisor stops it, with SIGINT, well before the 200 steps it would otherwise
    run; its finally block runs and its log, never flushed, keeps every line it wrote."""
    (tmp_path / "train.py").write_text(ORPHANED)
    err = tmp_path / "stderr.txt"
    with open(err, "wb") as f:
        p = subprocess.Popen([sys.executable, "-m", "advisor", "analyze", "--out", str(tmp_path / "run"),
                              "--warmup", "150", "--no-trials", "train.py"],
                             cwd=tmp_path, env=ENV, stdout=subprocess.DEVNULL, stderr=f)
    deadline = time.monotonic() + WAIT_S
    progress = tmp_path / "run" / "progress.jsonl"
    while '"step": 3' not in (progress.read_text() if progress.is_file() else ""):
        assert p.poll() is None and time.monotonic() < deadline, err.read_text(errors="replace")[-3000:]
        time.sleep(0.2)
    pid = int((tmp_path / "pid.txt").read_text())
    p.kill()
    p.wait()
    deadline = time.monotonic() + WAIT_S
    while _alive(pid):
        assert time.monotonic() < deadline, "the orphaned baseline ran on"
        time.sleep(0.2)
    lines = (tmp_path / "log.txt").read_text().splitlines()
    assert lines[-1] == "finally" and lines[0] == "step 0", lines
    steps = [int(x.split()[1]) for x in lines[:-1]]
    assert steps == list(range(len(steps))) and 2 <= len(steps) < 150, steps
    child = json.loads((tmp_path / "run" / "child.json").read_text())   # what it captured, saved by itself
    assert any("advisor's process ended while the script ran" in n for n in child["notes"]), child["notes"]
    assert child["stage"] == "warmup", child["stage"]
