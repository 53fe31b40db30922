"""The child runs a script exactly as `python3 script.py` would: stdout, stderr, exit code."""

from __future__ import annotations

import os

import pytest
from test_runner_support import run_many, run_plain, write

PROBE = '''
"""probe docstring"""
import os, sys
print("name", __name__)
print("argv", sys.argv)
print("path0", sys.path[0])
print("cwd", os.getcwd())
print("file", __file__)
print("package", __package__, "spec", __spec__, "cached", __cached__, "doc", __doc__)
print("globals", list(globals()))
print("builtins", type(__builtins__).__name__, "loader", type(__loader__).__name__, __loader__.name,
      __loader__.path == __file__)
print("main-is-me", sys.modules["__main__"].__dict__ is globals())
print("code", sys._getframe().f_code.co_filename == __file__)
print("advisor's pid in the environment", "ADVISOR_PARENT_PID" in os.environ)
def fail():
    raise ValueError("boom")
mode = sys.argv[1] if len(sys.argv) > 1 else ""
if mode == "raise":
    fail()
elif mode == "exit3":
    sys.exit(3)
elif mode == "exitmsg":
    sys.exit("bye")
elif mode == "interrupt":
    raise KeyboardInterrupt
print("normal end")
'''


MODES = {"exit3": 3, "raise": 1, "": 0, "exitmsg": 1, "interrupt": -2}
RELS = ("../sub/dir/probe.py", "link/dir/probe.py", "./../sub//dir/probe.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Every case run once under python3 and once under advisor (in parallel)."""
    tmp = tmp_path_factory.mktemp("diff")
    proj = str(tmp / "proj")
    script = write(tmp / "proj" / "probe.py", PROBE)
    sub = write(tmp / "sub" / "dir" / "probe.py", PROBE)
    (tmp / "other").mkdir()
    os.symlink(tmp / "sub", tmp / "other" / "link")
    bad = write(tmp / "bad" / "bad.py", "x = 1\ndef f(:\n    pass\n")
    cases = {}
    for mode in MODES:
        cases[f"mode-{mode}"] = (script, ["probe.py", mode, "b"] if mode else ["probe.py"], proj)
    for i, rel in enumerate(RELS):
        cases[f"rel-{i}"] = (sub, [rel, "exit3"], str(tmp / "other"))
    cases["syntax"] = (bad, ["bad.py"], str(tmp / "bad"))
    jobs = {name: dict(script=sc, argv=argv, cwd=cwd, run_dir=str(tmp / "runs" / name))
            for name, (sc, argv, cwd) in cases.items()}
    advised = run_many(jobs, tmp / "drivers")
    return {name: (run_plain(argv, cwd), advised[name]) for name, (sc, argv, cwd) in cases.items()}, tmp


@pytest.mark.parametrize("mode", list(MODES))
def test_same_as_python(runs, mode):
    (rc, out, err), (res, out2, err2) = runs[0][f"mode-{mode}"]
    assert rc == MODES[mode]
    assert out2 == out
    assert err2 == err  # identical tracebacks, including the last line
    assert res["exit"]["code"] == rc
    assert res["status"] == "incomplete"
    if mode == "raise":
        assert res["exit"]["exception"] == "ValueError: boom"
        assert res["incomplete_reasons"] == ["script raised ValueError: boom before the first step"]
    if mode == "exit3":
        assert res["incomplete_reasons"] == ["script exited with code 3 before the first step"]
    if mode == "":
        assert res["stage"] == "finished-early"
        assert "without a training step" in res["incomplete_reasons"][0]


@pytest.mark.parametrize("i", range(len(RELS)))
def test_subdirectory_relative_path_other_cwd(runs, i):
    """`cd other && python3 ../sub/dir/probe.py x` — also through a symlinked directory."""
    (rc, out, err), (res, out2, err2) = runs[0][f"rel-{i}"]
    assert (out2, err2, res["exit"]["code"]) == (out, err, rc), RELS[i]
    # CPython puts realpath(dirname(script)) first on sys.path: symlinks resolved
    assert f"path0 {os.path.realpath(runs[1] / 'sub' / 'dir')}\n" in out


def test_syntax_error_same_as_python(runs):
    (rc, out, err), (res, out2, err2) = runs[0]["syntax"]
    assert (rc, out, err) == (res["exit"]["code"], out2, err2)
    assert res["exit"]["exception"].startswith("SyntaxError")
