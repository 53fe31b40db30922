"""The child runs a script exactly as `python3 script.py` would: stdout, stderr, exit code."""

from __future__ import annotations

import os

import pytest

from test_runner_support import run_advised, run_plain, write

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


@pytest.mark.parametrize("mode,expect_rc", [
    ("exit3", 3), ("raise", 1), ("", 0), ("exitmsg", 1), ("interrupt", -2),
])
def test_same_as_python(tmp_path, capfd, mode, expect_rc):
    script = write(tmp_path / "proj" / "probe.py", PROBE)
    argv = ["probe.py", mode, "b"] if mode else ["probe.py"]
    cwd = str(tmp_path / "proj")
    rc, out, err = run_plain(argv, cwd)
    assert rc == expect_rc
    res, out2, err2, _ = run_advised(capfd, script, argv, cwd, str(tmp_path / "run"))
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


def test_subdirectory_relative_path_other_cwd(tmp_path, capfd):
    """`cd other && python3 ../sub/dir/probe.py x` — and through a symlinked directory."""
    script = write(tmp_path / "sub" / "dir" / "probe.py", PROBE)
    (tmp_path / "other").mkdir()
    os.symlink(tmp_path / "sub", tmp_path / "other" / "link")
    for rel in ("../sub/dir/probe.py", "link/dir/probe.py", "./../sub//dir/probe.py"):
        argv = [rel, "exit3"]
        rc, out, err = run_plain(argv, str(tmp_path / "other"))
        res, out2, err2, _ = run_advised(capfd, script, argv, str(tmp_path / "other"), str(tmp_path / "run"))
        assert (out2, err2, res["exit"]["code"]) == (out, err, rc), rel
        # CPython puts realpath(dirname(script)) first on sys.path: symlinks resolved
        assert f"path0 {os.path.realpath(tmp_path / 'sub' / 'dir')}\n" in out


def test_syntax_error_same_as_python(tmp_path, capfd):
    script = write(tmp_path / "bad.py", "x = 1\ndef f(:\n    pass\n")
    rc, out, err = run_plain(["bad.py"], str(tmp_path))
    res, out2, err2, _ = run_advised(capfd, script, ["bad.py"], str(tmp_path), str(tmp_path / "run"))
    assert (rc, out, err) == (res["exit"]["code"], out2, err2)
    assert res["exit"]["exception"].startswith("SyntaxError")
