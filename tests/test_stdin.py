"""The script's stdin: the same bytes for every process advisor starts (read once, replayed);
with a terminal, the processes after the baseline get an empty stdin, and a reference that
fails on it yields no noise figure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "fixtures" / "scripts" / "stdin_train.py"
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
ARGS = ["--warmup", "2", "--steps", "4", "--min-time", "0", "--profile-steps", "1", "--fix", "nan-loss",
        "--lookahead", "1"]


def _analyze(tmp_path: Path, **kwargs) -> tuple[subprocess.CompletedProcess, dict]:
    (tmp_path / "train.py").write_text(SCRIPT.read_text())
    r = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--out", str(tmp_path / "run"), *ARGS, "train.py"],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600, **kwargs)
    assert r.returncode == 0, r.stderr[-3000:]
    return r, json.loads((tmp_path / "run" / "run.json").read_text())


def test_every_process_reads_the_same_stdin(tmp_path):
    r, doc = _analyze(tmp_path, input="the answer\n")
    # the baseline, the repeat, the trial (and any process started ahead on a guess) read it:
    # the baseline says so on the terminal, the others in their stdout.txt
    said = r.stdout + r.stderr + "".join(p.read_text() for p in (tmp_path / "run" / "trials").glob("*/stdout.txt"))
    assert (r.stdout + r.stderr).count("got the answer") == 1
    assert said.count("got the answer") >= 3, said
    assert "EOFError" not in said
    trials = {t["name"]: t for t in doc["trials"]}
    assert trials["00-baseline-repeat"]["status"] == "reference"
    assert doc["trial_summary"]["noise"] is not None


def test_with_a_terminal_a_reference_that_fails_on_stdin_gives_no_noise_figure(tmp_path):
    master, slave = os.openpty()
    try:
        r, doc = _analyze(tmp_path, stdin=slave)
    finally:
        os.close(master)
        os.close(slave)
    assert "got (a terminal)" in r.stdout + r.stderr   # the baseline shares the terminal
    repeat = doc["trials"][0]
    assert repeat["name"] == "00-baseline-repeat" and repeat["status"] == "failed", repeat
    assert "EOFError" in repeat["reason"] and "no run-to-run noise figure" in repeat["reason"]
    assert doc["trial_summary"]["noise"] is None
