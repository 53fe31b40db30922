"""A quiet terminal: the script's output reaches the terminal for the baseline alone; every later
process (the repeat, the trials, the verification) writes it to stdout.txt in its own directory,
unless --verbose. A trial that fails still shows the user how its output ended. The reports
directory advisor creates carries a .gitignore, so runs stay out of `git status`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_cli import advisor

from advisor import rundir

REPO = Path(__file__).resolve().parent.parent
FAST = ["--warmup", "2", "--steps", "8", "--min-time", "0", "--profile-steps", "1"]

# Logs every step on stdout and on stderr. Its loader sleeps (I/O): more workers win even on 2
# cores, so the dataloader-workers trial is kept and the patch verified. It touches CUDA first,
# so that with --lookahead the trial starts ahead on a guess, in a directory renamed to its own.
LOGS_EVERY_STEP = '''
import sys, time, torch

class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 4096
    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((16,), float(i % 7)), i % 3

try:
    torch.cuda.init()
except Exception:
    pass
loader = torch.utils.data.DataLoader(Slow(), batch_size=8, shuffle=True)
model = torch.nn.Linear(16, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
step = 0
for epoch in range(100):
    for x, y in loader:
        step += 1
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}", flush=True)
        print(f"on stderr {step}", file=sys.stderr, flush=True)
'''

# Fails in a trial with DataLoader workers, after printing a step.
FAILS_WITH_WORKERS = '''
import torch
x = torch.randn(2048, 32)
y = (x[:, :4].sum(1) > 0).long()
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=64, shuffle=True)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
step = 0
for epoch in range(100):
    for xb, yb in loader:
        step += 1
        if loader.num_workers and step == 3:
            raise RuntimeError(f"planted: {loader.num_workers} workers")
        loss = torch.nn.functional.cross_entropy(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
'''


def _count(text: str, line: str) -> int:
    return sum(x == line or x.startswith(line + " ") for x in text.splitlines())


@pytest.fixture(scope="module")
def quiet_run(tmp_path_factory):
    """A run in a fresh working directory, in the default reports/ directory."""
    here = tmp_path_factory.mktemp("quiet")
    (here / "train.py").write_text(LOGS_EVERY_STEP)
    r = advisor("analyze", *FAST, "--fix", "dataloader-workers", "--lookahead", "1", "train.py", cwd=here)
    runs = [p for p in (here / "reports").iterdir() if p.is_dir()]
    return r, here, runs


def test_the_scripts_output_is_shown_for_the_baseline_only(quiet_run):
    r, _, runs = quiet_run
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((runs[0] / "run.json").read_text())
    steps = doc["steps_seen"]
    # the baseline's lines, each once: stdout on stdout, stderr on stderr
    assert [_count(r.stdout, f"step {n} loss") for n in range(1, steps + 1)] == [1] * steps
    assert _count(r.stdout, f"step {steps + 1} loss") == 0
    assert [_count(r.stderr, f"on stderr {n}") for n in (1, steps)] == [1, 1]
    assert "each later process writes it to stdout.txt" in " ".join(r.stderr.split())


def test_every_later_process_writes_its_output_in_its_directory(quiet_run):
    r, _, runs = quiet_run
    run = runs[0]
    doc = json.loads((run / "run.json").read_text())
    ran = [t for t in doc["trials"] if t.get("elapsed_s")]
    named = [t["name"] for t in ran if not t["name"].startswith("00-baseline-repeat-")]   # re-timed on a busy host
    assert named[:2] == ["00-baseline-repeat", "01-dataloader-workers-2"]
    assert any(t.get("started_held") or t.get("started_warm") for t in ran)  # started ahead: it still lands there
    for t in ran:
        text = (run / "trials" / t["name"] / "stdout.txt").read_text()
        assert _count(text, "step 1 loss") == 1 and _count(text, "on stderr 1") == 1, t["name"]
    assert doc["patch"]["verification"]["runs"] >= 1
    verified = (run / "verify" / "run-1" / "stdout.txt").read_text()
    assert _count(verified, "step 1 loss") == 1 and _count(verified, "on stderr 1") == 1


def test_the_reports_directory_advisor_creates_is_ignored_by_git(quiet_run):
    _, here, runs = quiet_run
    assert len(runs) == 1
    assert (here / "reports" / ".gitignore").read_text().splitlines()[-1] == "*"


def test_verbose_shows_every_process_output(tmp_path):
    (tmp_path / "train.py").write_text(LOGS_EVERY_STEP)
    r = advisor("analyze", "--out", tmp_path / "elsewhere" / "run", "--verbose", *FAST, "--fix", "dataloader-workers",
                "--no-verify", "train.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _count(r.stdout, "step 1 loss") >= 3       # the baseline, the repeat, the trial
    assert _count(r.stderr, "on stderr 1") >= 3
    assert not list((tmp_path / "elsewhere" / "run" / "trials").glob("*/stdout.txt"))
    assert "each later process writes it" not in r.stderr
    # --out: no reports/ directory, and no .gitignore beside the run
    assert not (tmp_path / "reports").exists() and not list(tmp_path.rglob(".gitignore"))


def test_a_failed_trial_shows_how_its_output_ended(tmp_path):
    (tmp_path / "train.py").write_text(FAILS_WITH_WORKERS)
    r = advisor("analyze", "--out", tmp_path / "run", *FAST, "--fix", "dataloader-workers", "train.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    failed = next(t for t in doc["trials"] if t["name"] == "01-dataloader-workers-2")
    assert failed["status"] == "failed"
    reason = failed["reason"]
    assert "its output (trials/01-dataloader-workers-2/stdout.txt) ends: " in reason
    assert reason.endswith("| RuntimeError: planted: 2 workers")
    assert 'raise RuntimeError(f"planted: {loader.num_workers} workers")' in reason
    # on the terminal: in the trial's verdict line, not as a traceback scrolling by
    said = " ".join(r.stderr.split())
    assert "01-dataloader-workers-2: failed, " in said and "RuntimeError: planted: 2 workers" in said
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout
    assert "Traceback (most recent call last):" in (tmp_path / "run" / "trials" / failed["name"] / "stdout.txt").read_text()


# --- reports/.gitignore ------------------------------------------------------------------------

def test_gitignore_is_written_once_when_advisor_creates_the_reports_directory(tmp_path):
    root = tmp_path / "reports"
    first = rundir.new_run_dir("train.py", root=str(root))
    assert (root / ".gitignore").read_text() == rundir.GITIGNORE
    (root / ".gitignore").write_text("*\n!keep/\n")           # the user's own: never overwritten
    second = rundir.new_run_dir("train.py", root=str(root))
    assert first != second and (root / ".gitignore").read_text() == "*\n!keep/\n"


def test_no_gitignore_in_a_reports_directory_that_was_there_or_with_out(tmp_path):
    (tmp_path / "mine").mkdir()
    rundir.new_run_dir("train.py", root=str(tmp_path / "mine"))
    rundir.new_run_dir("train.py", out=str(tmp_path / "elsewhere" / "run"))
    assert not list(tmp_path.rglob(".gitignore"))


def test_this_repositorys_example_reports_stay_tracked():
    """This repository commits example reports under reports/examples/: its .gitignore ignores
    the runs beside them, not them (advisor writes no reports/.gitignore where reports/ exists)."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")

    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO).returncode == 0

    assert not (REPO / "reports" / ".gitignore").exists()
    assert not ignored("reports/examples/cifar_resnet-h100/run.json")
    assert ignored("reports/20260101-000000-train/run.json")
