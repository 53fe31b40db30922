"""The Python-level sandbox call by call, in a process of its own (the hooks replace builtins):
every mutating call on a user's path lands in the run directory or is left undone, the script
still sees what it wrote, and temporary files it made are its own."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

BODY = """
import json, os, pathlib, shutil, sys, tempfile
sys.path.insert(0, REPO)
from advisor.runner.sandbox import Sandbox
notes = []
sb = Sandbox(RUN, notes.append)
sb.install()
u = pathlib.Path(USER)
seen = {}
os.truncate(u / "big.txt", 3)                     # onto a copy
seen["truncated"] = open(u / "big.txt").read()
os.chmod(u / "keep.txt", 0o600)                   # not done
shutil.copy(u / "keep.txt", u / "copy.txt")       # the destination redirected
seen["copy"] = open(u / "copy.txt").read()
shutil.move(str(u / "dir"), str(u / "moved"))     # a user's directory: copied, left in place
seen["moved"] = sorted(os.listdir(sb.redirected[str(u / "moved")]))
(u / "gone.txt").unlink()
try:
    open(u / "gone.txt")
    seen["gone"] = "readable"
except FileNotFoundError:
    seen["gone"] = "FileNotFoundError"
(u / "gone.txt").unlink(missing_ok=True)          # a second delete: as if it were gone
try:
    os.remove(u / "gone.txt")
    seen["second"] = "removed again"
except FileNotFoundError:
    seen["second"] = "FileNotFoundError"
(u / "new.txt").write_text("mine")                # written, then read back and deleted
seen["new"] = (u / "new.txt").read_text()
os.remove(u / "new.txt")
seen["new_after"] = os.path.exists(sb.redirected.get(str(u / "new.txt"), "/nonexistent"))
with tempfile.TemporaryDirectory() as t:          # the script's own scratch space
    pathlib.Path(t, "x").write_text("x")
    seen["tempdir"] = os.path.dirname(t) == tempfile.gettempdir()
seen["mkdtemp_in_user"] = tempfile.mkdtemp(dir=USER).startswith(RUN)   # asked inside the user's tree
with tempfile.NamedTemporaryFile("w", delete=True) as f:
    f.write("x")
    name = f.name
seen["tempfile_removed"] = not os.path.exists(name)
os.symlink("target", u / "link")
os.link(u / "keep.txt", u / "hard")
seen["ops"] = sorted({e["op"] for e in sb.doc()["redirected"]})
print(json.dumps(seen))
"""


def test_each_mutating_call_is_redirected_or_left_undone(tmp_path):
    user, run = tmp_path / "user", tmp_path / "run"
    (user / "dir").mkdir(parents=True)
    (user / "dir" / "a").write_text("a")
    (user / "big.txt").write_text("0123456789")
    (user / "keep.txt").write_text("keep")
    (user / "gone.txt").write_text("gone")
    before = {p: p.read_bytes() for p in user.rglob("*") if p.is_file()}
    modes = {p: p.stat().st_mode for p in user.rglob("*")}
    code = f"REPO, RUN, USER = {str(REPO)!r}, {str(run)!r}, {str(user)!r}\n" + textwrap.dedent(BODY)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["truncated"] == "012" and seen["copy"] == "keep" and seen["moved"] == ["a"]
    assert seen["gone"] == "FileNotFoundError" and seen["second"] == "FileNotFoundError"
    assert seen["new"] == "mine" and seen["new_after"] is False
    assert seen["tempdir"] and seen["tempfile_removed"] and seen["mkdtemp_in_user"]
    assert {"truncate", "chmod", "copy", "move", "delete", "write", "symlink", "link"} <= set(seen["ops"])
    # the user's tree: every file as it was, nothing added, no mode changed
    after = {p: p.read_bytes() for p in user.rglob("*") if p.is_file()}
    assert after == before
    assert {p: p.stat().st_mode for p in user.rglob("*")} == modes


VIEW = """
import glob, json, os, pathlib, shutil, sys
sys.path.insert(0, REPO)
from advisor.runner.sandbox import Sandbox
from advisor.runner.sandbox_hooks import REAL
os.chdir(USER)
sb = Sandbox(RUN, lambda text: None)
sb.install()
from torch.utils.tensorboard import SummaryWriter
seen = {}
writer = SummaryWriter("runs/exp1")          # a library makes the directory: redirected
writer.add_scalar("loss", 1.0, 0)
writer.flush()
seen["exists"] = os.path.exists("runs/exp1")
if not os.path.exists("runs/exp1/ckpt"):     # sthalles/SimCLR's save_config_file
    os.makedirs("runs/exp1/ckpt")
pathlib.Path("runs/exp1/ckpt/model.txt").write_text("m")
seen["listdir"] = sorted(n.split(".")[0] for n in os.listdir("runs/exp1"))
seen["glob"] = sorted(os.path.basename(p).split(".")[0] for p in glob.glob("runs/exp1/*"))
seen["iterdir"] = sorted(p.name.split(".")[0] for p in pathlib.Path("runs/exp1").iterdir())
seen["size"] = os.path.getsize("runs/exp1/ckpt/model.txt")
seen["top"] = sorted(os.listdir("."))
os.remove("keep.txt")
seen["removed"] = [os.path.exists("keep.txt"), "keep.txt" in os.listdir(".")]
pathlib.Path("keep.txt").write_text("again")
seen["written_again"] = [os.path.exists("keep.txt"), "keep.txt" in os.listdir("."), open("keep.txt").read()]
shutil.rmtree("old")
seen["rmtree"] = [os.path.exists("old"), os.path.exists("old/a.txt"), os.path.isdir("old")]
seen["real"] = sorted(REAL["listdir"](USER))
print(json.dumps(seen))
"""


def test_the_script_sees_what_it_wrote_and_the_users_tree_stays_as_it_was(tmp_path):
    """Paths redirected or deleted in the sandbox are stat'ed, listed and globbed as the script
    left them: `if not os.path.exists(d): os.makedirs(d)` after TensorBoard's writer made `d`
    (sthalles/SimCLR, on an H200) had failed with FileExistsError."""
    user, run = tmp_path / "user", tmp_path / "run"
    (user / "old").mkdir(parents=True)
    (user / "old" / "a.txt").write_text("a")
    (user / "keep.txt").write_text("keep")
    code = f"REPO, RUN, USER = {str(REPO)!r}, {str(run)!r}, {str(user)!r}\n" + textwrap.dedent(VIEW)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["exists"] and seen["listdir"] == seen["glob"] == seen["iterdir"] == ["ckpt", "events"]
    assert seen["size"] == 1 and seen["top"] == ["keep.txt", "old", "runs"]
    assert seen["removed"] == [False, False] and seen["written_again"] == [True, True, "again"]
    assert seen["rmtree"] == [False, False, False]
    assert seen["real"] == ["keep.txt", "old"] and (user / "keep.txt").read_text() == "keep"
    assert (user / "old" / "a.txt").exists()
