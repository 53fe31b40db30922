"""The whole run, as the user runs it: the script's own command on a copy of its directory, and
patch.command on a copy with fixes.patch applied, each timed from launch to exit (one-off costs
included). Prints one JSON line per run directory.

    python3 benchmarks/end_to_end.py RUN_DIR [RUN_DIR ...]

A run directory is what `advisor analyze` wrote (run.json, fixes.patch). The copies go under
$E2E (default /tmp/e2e); each command starts in a scratch directory of its own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path


def _timed(cmd: list[str], cwd: Path) -> tuple[float, int]:
    cwd.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if proc.returncode:
        sys.stderr.write(proc.stderr[-2000:])
    return time.monotonic() - start, proc.returncode


def one(run_dir: Path, scratch: Path) -> dict:
    doc = json.loads((run_dir / "run.json").read_text())
    cmd = doc["command"]
    script = Path(cmd["script"])
    typed, args = cmd["argv"][0], cmd["argv"][1:]
    patch = doc.get("patch") or {}
    out = {"name": run_dir.name, "patched": bool(patch.get("file")), "command": patch.get("command"),
           "left_out": sorted(patch.get("left_out") or {}), "projected": patch.get("end_to_end")}
    plain = scratch / run_dir.name / "plain"
    shutil.rmtree(plain.parent, ignore_errors=True)
    shutil.copytree(script.parent, plain, ignore=shutil.ignore_patterns("__pycache__"))
    out["plain_s"], out["plain_rc"] = _timed([sys.executable, str(plain / script.name), *args], plain.parent / "cwd-plain")
    if not patch.get("command") or patch["command"][0] != "python":
        return out   # no patch to run, or a torchrun launch (not timed here)
    patched = plain.parent / "patched"
    shutil.copytree(script.parent, patched, ignore=shutil.ignore_patterns("__pycache__"))
    if patch.get("file"):
        subprocess.run(["patch", "-s", "-p1", "-d", str(patched), "-i", str(run_dir / patch["file"])], check=True)
    command = [sys.executable, *(str(patched / script.name) if tok == typed else tok for tok in patch["command"][1:])]
    out["patched_s"], out["patched_rc"] = _timed(command, plain.parent / "cwd-patched")
    out["speedup"] = round(out["plain_s"] / out["patched_s"], 3) if out["patched_s"] else None
    return out


def main(dirs: list[str]) -> None:
    scratch = Path(os.environ.get("E2E", "/tmp/e2e"))
    for d in dirs:
        print(json.dumps(one(Path(d), scratch)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
