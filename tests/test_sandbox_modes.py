"""The hooks-only sandbox is a mode of its own, tested as such: the sandbox tests run once more
where the kernel refuses unshare(2) with EINVAL, as gVisor and most unprivileged containers do
(tests/no_unshare.py's seccomp filter), so that no process gets the copy-on-write view.
(test_safety.py and test_where_it_runs.py run whole analyzes in both modes themselves.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HOOKS_TESTS = ["tests/test_sandbox.py", "tests/test_sandbox_hooks.py"]


def test_the_kernel_refuses_unshare_under_the_filter():
    r = subprocess.run([sys.executable, str(REPO / "tests" / "no_unshare.py"), "--", sys.executable,
                        str(REPO / "advisor" / "runner" / "jail.py"), "--root", "/tmp", "--", sys.executable, "-c",
                        "import os; print(os.environ['ADVISOR_SANDBOX'], os.environ.get('ADVISOR_SANDBOX_WHY'))"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    kind, why = r.stdout.strip().split(" ", 1)
    assert kind == "python" and "unshare: Invalid argument" in why


@pytest.mark.skipif(os.environ.get("ADVISOR_HOOKS_ONLY_RUN") == "1", reason="already the hooks-only run")
def test_the_sandbox_tests_pass_with_the_hooks_alone(tmp_path):
    env = dict(os.environ, ADVISOR_HOOKS_ONLY_RUN="1")
    r = subprocess.run([sys.executable, str(REPO / "tests" / "no_unshare.py"), "--", sys.executable, "-m", "pytest",
                        "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t"), *HOOKS_TESTS],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]
    assert " passed" in r.stdout and " failed" not in r.stdout
