"""One timed window at a time (advisor.trials.windows), on real processes: while one process times
its steps the others are stopped, whole groups, and continued when no window is open or before
they are stopped for good."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from advisor.runner.follow import Signals
from advisor.trials.windows import Windows

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc")


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def _wait_state(pid: int, want: str, within: float = 5.0) -> str:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        got = _state(pid)
        if (got == "T") == (want == "T"):
            return got
        time.sleep(0.02)
    return _state(pid)


@pytest.fixture
def procs():
    """Three busy processes, each the leader of its own group, with a busy child (a DataLoader
    worker's place)."""
    code = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'while True: pass']); exec('while True: pass')"
    started = [subprocess.Popen([sys.executable, "-c", code], start_new_session=True) for _ in range(3)]
    time.sleep(0.5)
    yield started
    for p in started:
        subprocess.run(["pkill", "-KILL", "-g", str(p.pid)], check=False)
        p.wait()


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-g", str(pid)], capture_output=True, text=True).stdout.split()
    return [int(x) for x in out if int(x) != pid]


def test_others_stop_while_one_times_its_steps_and_go_on_after(procs):
    windows = Windows()
    sigs = []
    for p in procs:
        s = Signals()
        s.pgid = p.pid
        sigs.append((s, windows.watch(s)))
    (a, tell_a), (b, tell_b), (c, tell_c) = sigs
    tell_a("warmup")
    assert all(_wait_state(p.pid, "R") != "T" for p in procs)
    tell_a("measuring")   # a's window opens: b and c stop, their workers too
    assert _wait_state(procs[0].pid, "R") != "T"
    for p in procs[1:]:
        assert _wait_state(p.pid, "T") == "T"
        assert all(_wait_state(w, "T") == "T" for w in _children(p.pid))
    tell_a("profile")     # still a's window (the profiled steps)
    assert _wait_state(procs[1].pid, "T") == "T"
    tell_a("exporting")   # closed: everyone goes on
    assert all(_wait_state(p.pid, "R") != "T" for p in procs)
    assert windows.stops == 2

    tell_b("measuring")
    assert _wait_state(procs[2].pid, "T") == "T"
    windows.forget(c)        # stopped for good by the ladder (or Ctrl-C): continued first
    assert _wait_state(procs[2].pid, "R") != "T"
    tell_c("warmup")      # a process the windows forgot is not stopped again
    assert _wait_state(procs[2].pid, "R") != "T"
    tell_b("done")
    assert all(_wait_state(p.pid, "R") != "T" for p in procs)
    tell_a("profiler-started")   # a short script's profile, in a process of its own
    assert _wait_state(procs[1].pid, "T") == "T"
    tell_a("exporting")
    assert _wait_state(procs[1].pid, "R") != "T"


def test_a_process_that_starts_during_a_window_is_stopped_at_its_first_word(procs):
    windows = Windows()
    a, late = Signals(), Signals()
    a.pgid = procs[0].pid
    tell_a = windows.watch(a)
    tell_a("measuring")
    tell_late = windows.watch(late)   # watched before run_child knows its process group
    tell_late("started")          # nothing to stop yet
    late.pgid = procs[1].pid
    tell_late("warmup")
    assert _wait_state(procs[1].pid, "T") == "T"
    tell_a("measured")
    assert _wait_state(procs[1].pid, "R") != "T"


def test_a_process_that_said_measuring_before_it_was_stopped_goes_on(procs):
    """Two processes open their windows at once: the second's record is read after the first's
    window stopped it. Its window is under way: it is continued (a stop inside it would be
    timed), and neither is left stopped when both close."""
    windows = Windows()
    a, b = Signals(), Signals()
    a.pgid, b.pgid = procs[0].pid, procs[1].pid
    tell_a, tell_b = windows.watch(a), windows.watch(b)
    tell_a("measuring")
    assert _wait_state(procs[1].pid, "T") == "T"
    tell_b("measuring")
    assert _wait_state(procs[1].pid, "R") != "T" and _wait_state(procs[0].pid, "R") != "T"
    tell_a("done")
    tell_b("done")
    assert all(_wait_state(p.pid, "R") != "T" for p in procs) and not windows.stopped
