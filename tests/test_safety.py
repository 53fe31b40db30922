"""Nothing advisor starts besides the baseline changes the user's files.

A real `advisor analyze` (baseline, its repeat started ahead, a trial, a process started on a
guess, the patch's verification) runs a script that deletes, renames, appends, saves,
symlinks, clears directories and (under the OS-level sandbox) runs `rm` in a subprocess, under
its working directory (relative paths), an absolute directory inside the temp directory, one
outside it and one in the user's home. A watcher hashes all of them before and after: the only
changes are the baseline's, once. Both sandboxes: the copy-on-write view where this machine
allows it, and the Python-level hooks alone, under a kernel that refuses unshare(2) with EINVAL
as gVisor does (tests/no_unshare.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "tests" / "fixtures" / "scripts" / "mutating_train.py"


def _overlay_possible() -> bool:
    probe = subprocess.run([sys.executable, str(REPO / "advisor" / "runner" / "jail.py"), "--root", "/tmp",
                            "--", sys.executable, "-c", "import os; print(os.environ['ADVISOR_SANDBOX'])"],
                           capture_output=True, text=True, timeout=60)
    return probe.stdout.strip() == "overlay"


def _state(dirs: list[Path]) -> dict[str, str]:
    out = {}
    for d in dirs:
        for p in sorted(d.rglob("*")):
            if "__pycache__" in p.parts:
                continue
            if p.is_symlink():
                out[str(p)] = "-> " + os.readlink(p)
            elif p.is_file():
                out[str(p)] = hashlib.sha256(p.read_bytes()).hexdigest()
            elif p.is_dir():
                out[str(p)] = "dir"
    return out


def _lay_out(d: Path, shell: bool) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for n in (1, 2, 3):
        (d / f"scratch-{n}.txt").write_text(f"scratch {n}")
        (d / f"old-{n}.txt").write_text(f"old {n}")
        (d / f"cache-{n}").mkdir()
        (d / f"cache-{n}" / "x").write_text("cached")
        if shell:
            (d / f"sub-{n}.txt").write_text(f"sub {n}")
    (d / "log.txt").write_text("the user's log\n")


@pytest.mark.parametrize("sandbox", ["overlay", "python"])
def test_nothing_but_the_baseline_changes_the_users_files(tmp_path, sandbox):
    if sandbox == "overlay" and not _overlay_possible():
        pytest.skip("this machine allows no user namespace with overlayfs: the Python hooks alone run")
    shell = sandbox == "overlay"   # a subprocess's rm is out of the Python hooks' reach
    systmp, home, outside, proj = (tmp_path / n for n in ("systmp", "home", "outside", "proj"))
    inside_tmp = systmp / "state"
    dirs = [proj, inside_tmp, home, outside]
    for d in dirs:
        _lay_out(d, shell)
    (proj / "train.py").write_text(SCRIPT.read_text())
    before = _state(dirs)
    env = dict(os.environ, TMPDIR=str(systmp), HOME=str(home),
               PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    # the hooks alone: the kernel refuses the namespaces, as on gVisor and in most containers
    wrap = [sys.executable, str(REPO / "tests" / "no_unshare.py"), "--"] if sandbox == "python" else []
    common = ["--warmup", "2", "--steps", "4", "--min-time", "0", "--profile-steps", "1"]
    script = ["train.py", ".", str(inside_tmp), str(home), str(outside), *(["--shell"] if shell else [])]
    runs = {"trials": ["--lookahead", "1", "--fix", "nan-loss"],   # the repeat, a guess, a trial
            "verify": ["--apply", "amp", "--no-trials"]}           # the patch's verification
    docs = {}
    for name, opts in runs.items():
        r = subprocess.run([*wrap, sys.executable, "-m", "advisor", "analyze", "--out", str(tmp_path / name), *common, *opts,
                            *script], cwd=proj, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stderr[-3000:]
        docs[name] = json.loads((tmp_path / name / "run.json").read_text())
        # the terminal and the report say which sandbox ran
        assert "your files:" in r.stdout + r.stderr
        assert 'id="sandbox"' in (tmp_path / name / "index.html").read_text()
    # (a loaded host may time the reference again first: 00-baseline-repeat-2, -3; advisor.trials.sanity)
    names = [t["name"] for t in docs["trials"]["trials"] if not t["name"].startswith("00-baseline-repeat-")]
    assert names[:2] == ["00-baseline-repeat", "01-nan-loss"]
    assert docs["verify"]["patch"]["verification"]["runs"] >= 1, docs["verify"]["patch"]["verification"]

    # the baselines' pids, from the lines they appended to the real log: one each
    after = _state(dirs)
    log = (proj / "log.txt").read_text().splitlines()
    assert log[0] == "the user's log" and len(log) == 3, log
    pids = [line.split()[1] for line in log[1:]]
    for d in dirs:
        assert (d / "log.txt").read_text() == "the user's log\n" + "".join(f"pid {p}\n" for p in pids)
        assert os.readlink(d / "latest") == f"target-{pids[-1]}"
        assert (d / "scratch-3.txt").exists() and (d / "old-3.txt").exists() and (d / "cache-3").exists()
        if shell:
            assert (d / "shell.log").read_text() == "".join(f"{p}\n" for p in pids)
    changed = {p for p in before.keys() | after.keys() if before.get(p) != after.get(p)}
    by_baselines = {str(d / n) for d in dirs for k in (1, 2)
                    for n in (f"scratch-{k}.txt", f"old-{k}.txt", f"old-{k}.bak", f"cache-{k}", f"cache-{k}/x",
                              "log.txt", "model.pt", "arr.npy", "latest", "made", "made/deep",
                              *((f"sub-{k}.txt", "shell.log") if shell else ()))}
    assert changed == by_baselines, sorted(changed ^ by_baselines)

    # which sandbox ran, and what it turned away, in the trials' records
    out = tmp_path / "trials"
    repeat = json.loads((out / "trials" / "00-baseline-repeat" / "child.json").read_text())
    assert repeat["sandbox"]["kind"] == sandbox
    ops = {(e["op"], e["path"]) for e in repeat["sandbox"]["redirected"]}
    assert ("delete", str((home / "scratch-2.txt").resolve())) in ops
    assert ("rename", str((outside / "old-2.bak").resolve())) in ops
    for doc in docs.values():
        assert doc["sandbox"]["kind"] == sandbox
    if shell:   # the subprocess's rm and append landed in the copy-on-write layer
        absorbed = {(e["op"], e["path"]) for e in repeat["sandbox"]["absorbed"]}
        assert ("delete", str(outside / "sub-2.txt")) in absorbed
        assert ("write", str(home / "shell.log")) in absorbed
    if sandbox == "python":
        assert "Invalid argument" in repeat["sandbox"]["why"]
        assert not repeat["sandbox"].get("unredirected"), "every change went through the hooks"
    # a trial runs in the user's own directory; its relative writes land in its run directory
    assert (out / "trials" / "00-baseline-repeat" / "outputs" / str(proj.resolve()).lstrip("/") / "log.txt").is_file()
