"""The OS-level sandbox (runner/jail.py): which directories it overlays, what it keeps real,
and its fallback where the machine allows no user namespace."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.runner import jail

JAIL = Path(jail.__file__)
MOUNTINFO = """\
22 1 253:1 / / rw,relatime - ext4 /dev/vda rw
23 22 0:5 / /dev rw,nosuid - devtmpfs devtmpfs rw
24 22 0:21 / /proc rw - proc proc rw
25 22 0:22 / /sys rw - sysfs sysfs rw
26 22 0:40 / /data\\040set rw - xfs /dev/vdb rw
27 22 0:41 / /mnt/tools ro,nosuid - squashfs /dev/loop0 ro
28 22 0:42 / /tmp rw - tmpfs tmpfs rw
29 22 0:43 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
30 22 0:44 / /run rw - tmpfs tmpfs rw
"""


def test_mountinfo_gives_the_writable_filesystems_outside_the_kernels_views():
    writable, other = jail.mounts(MOUNTINFO)
    assert writable == ["/", "/data set", "/tmp"]   # octal escapes read back
    assert other == ["/mnt/tools"]                  # read-only: not overlaid, never hidden


def _run_in_jail(tmp_path: Path, env: dict, code: str) -> subprocess.CompletedProcess:
    (tmp_path / "run").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, str(JAIL), "--root", str(tmp_path / "run"), "--",
                           sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)


def test_without_the_overlay_the_child_is_told_why(tmp_path):
    r = _run_in_jail(tmp_path, {**os.environ, jail.FORCE_ENV: "python"},
                     "import os; print(os.environ['ADVISOR_SANDBOX'], '|', os.environ['ADVISOR_SANDBOX_WHY'])")
    kind, why = r.stdout.strip().split(" | ")
    assert kind == "python" and "no copy-on-write view" in why


def test_in_the_overlay_writes_outside_the_run_directory_go_with_the_process(tmp_path):
    (tmp_path / "mine.txt").write_text("the user's")
    code = ("import json, os; open('mine.txt', 'w').write('changed'); os.remove('mine.txt');"
            "open('run/result.txt', 'w').write('kept');"
            "print(os.environ['ADVISOR_SANDBOX'], json.dumps(os.environ.get('ADVISOR_SANDBOX_LAYERS')))")
    r = _run_in_jail(tmp_path, dict(os.environ), code)
    assert r.returncode == 0, r.stderr
    kind = r.stdout.split()[0]
    if kind != "overlay":
        pytest.skip("this machine allows no user namespace with overlayfs: the Python layer alone runs")
    assert (tmp_path / "mine.txt").read_text() == "the user's"
    assert (tmp_path / "run" / "result.txt").read_text() == "kept"   # the run directory is real
    layers = json.loads(json.loads(r.stdout.split(None, 1)[1]))
    assert any(layer["target"] == "/tmp" or str(tmp_path).startswith(layer["target"]) for layer in layers)
