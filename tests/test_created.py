"""The tree as the baseline found it (runner/created.py, Sandbox.hide): the baseline records
what it creates through Python and what of that it reads back; every process after it sees the
rest as absent. In a process of its own (the hooks replace builtins), one as the baseline and
one as a trial after it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BASELINE = """
import json, os, pathlib, shutil, sys, tempfile
sys.path.insert(0, REPO)
from advisor.runner.created import Created
rec = Created(RUN)
rec.install()
u = pathlib.Path(USER)
out = u / "outputs" / "exp1"
assert not out.exists()
out.mkdir(parents=True)                                   # a new tree: its top is recorded
(out / "log.txt").open("a").write("baseline\\n")           # inside it: the top covers it
os.makedirs(u / "existing" / "sub")                        # a directory that existed: its new child alone
tmp = u / "ckpt.tmp"
with open(tmp, "wb") as f:
    f.write(b"weights")
os.replace(tmp, u / "ckpt.pt")                             # an atomic save: the rename's destination
(u / "data").mkdir()
(u / "data" / "cache.bin").write_bytes(b"input")
(u / "data" / "cache.bin").read_bytes()                    # read back: the script's input
(u / "listed").mkdir()
os.listdir(u / "listed")                                   # listed: read back too
(u / "notes.txt").write_text("again")                      # existed before: not created
tempfile.mkdtemp()                                         # the temporary directory: left out
os.makedirs(os.path.join(RUN, "trace"), exist_ok=True)     # advisor's own directory: left out
rec.save()
rec.uninstall()
print(json.dumps(json.load(open(os.path.join(RUN, "created.json")))))
"""

TRIAL = """
import json, os, pathlib, sys
sys.path.insert(0, REPO)
from advisor.runner.sandbox import Sandbox
sb = Sandbox(RUN, lambda text: None)
sb.hide_from(CREATED)
sb.install()
u = pathlib.Path(USER)
out = u / "outputs" / "exp1"
seen = {"exists": out.exists(), "top": sorted(os.listdir(u))}
try:
    os.listdir(u / "outputs")
    seen["outputs"] = "listed"
except FileNotFoundError:
    seen["outputs"] = "FileNotFoundError"
out.mkdir(parents=True)                                    # as the baseline did: no FileExistsError
with open(out / "log.txt", "a") as f:                      # a new file, not the baseline's text
    f.write("trial\\n")
seen["log"] = (out / "log.txt").read_text()
try:
    os.remove(u / "ckpt.pt")
    seen["remove"] = "removed"
except FileNotFoundError:
    seen["remove"] = "FileNotFoundError"
seen["ckpt"] = os.path.exists(u / "ckpt.pt")
seen["data"] = (u / "data" / "cache.bin").read_bytes().decode()
seen["existing"] = sorted(os.listdir(u / "existing"))
seen["hidden"] = sb.doc().get("hidden")
print(json.dumps(seen))
"""


def _run(body: str, **names) -> dict:
    code = "".join(f"{k} = {str(v)!r}\n" for k, v in names.items()) + textwrap.dedent(body)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_trial_finds_what_the_baseline_made_absent_but_the_inputs_it_read(tmp_path):
    user, run, trial = tmp_path / "user", tmp_path / "run", tmp_path / "run" / "trials" / "01"
    (user / "existing").mkdir(parents=True)
    (user / "notes.txt").write_text("before")
    run.mkdir()
    made = _run(BASELINE, REPO=REPO, RUN=run, USER=user)
    hidden = {str(Path(p).relative_to(user)) for p in made["hidden"]}
    assert hidden == {"outputs", "existing/sub", "ckpt.pt"}, made
    assert {str(Path(p).relative_to(user)) for p in made["read_back"]} == {"data", "listed"}

    trial.mkdir(parents=True)
    seen = _run(TRIAL, REPO=REPO, RUN=trial, USER=user, CREATED=run / "created.json")
    assert seen["exists"] is False and seen["outputs"] == "FileNotFoundError"
    assert "outputs" not in seen["top"] and "ckpt.pt" not in seen["top"] and "data" in seen["top"], seen
    assert seen["log"] == "trial\n"                       # not "baseline\ntrial\n"
    assert seen["remove"] == "FileNotFoundError" and seen["ckpt"] is False
    assert seen["data"] == "input" and seen["existing"] == []
    assert set(seen["hidden"]) >= {str(user / "outputs"), str(user / "ckpt.pt")}
    # the user's tree is the baseline's
    assert (user / "outputs" / "exp1" / "log.txt").read_text() == "baseline\n"
    assert (user / "ckpt.pt").read_bytes() == b"weights" and (user / "existing" / "sub").is_dir()
