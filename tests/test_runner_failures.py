"""Bad scripts: each run ends with status incomplete, a one-line reason, the exit code, and a
child.json in the run dir keeping what was captured. run_child itself never raises."""

from __future__ import annotations

import json
import os

import pytest
from test_runner_support import line_of, run_many, train_script, write

from advisor.runner.parent import validate_script


def _child_json(run_dir):
    with open(os.path.join(run_dir, "child.json")) as f:
        return json.load(f)


def test_validate_script(tmp_path):
    assert validate_script(tmp_path / "nope.py") == f"{tmp_path / 'nope.py'}: no such file"
    assert validate_script(tmp_path) == f"{tmp_path}: is a directory, not a Python script"
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" * 10)
    assert "not a Python script (binary file)" in validate_script(binary)
    notes = write(tmp_path / "notes.txt", "Remember to buy milk, and train the model!\n")
    assert "not a Python script" in validate_script(notes)
    bad = write(tmp_path / "bad.py", "import torch\n\ndef f(:\n    pass\n")
    msg = validate_script(bad)
    assert msg.startswith(f"{bad}:3: SyntaxError: ") and "\n" not in msg
    indent = write(tmp_path / "indent.py", "if True:\nprint(1)\n")
    assert validate_script(indent).startswith(f"{indent}:2: IndentationError: ")
    good = write(tmp_path / "ok.py", "print('hi')\n")
    assert validate_script(good) is None
    noext = write(tmp_path / "train", "#!/usr/bin/env python3\nprint('hi')\n")
    assert validate_script(noext) is None  # python runs extension-less scripts too


# The waiting ones first: they run alongside the others (a few at a time: 2-core machines).
# Overall timeouts count from launch, torch's import included: HUNG_S is a hanging script's
# timeout, long enough that its first steps come before it on a loaded machine (20 s left
# little room after the imports), and its first-step limit is as long, so that only the
# overall timeout can stop it.
HUNG_S = 45
SCENARIOS = {
    "hang": dict(hook="if it == 4: time.sleep(120)", timeout=HUNG_S, step_timeout=HUNG_S),
    "deaf": dict(hook="if it == 2: import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                      "time.sleep(120)", timeout=HUNG_S, step_timeout=HUNG_S, grace=1),
    # step_timeout counts from the script's start (not from launch: importing torch is ours)
    # 15 s: the script's own imports (torch.optim pulls in torch._dynamo) count, and on a loaded
    # 2-core machine they alone have taken over 5 s
    "nostep": dict(hook="time.sleep(120)", step_timeout=15),
    # stops stepping mid-run (a deadlocked loader, a hung collective): stalled, not timed out
    "stall": dict(hook="if it == 9: time.sleep(600)", stall_timeout=3, timeout=150),
    "early": dict(hook="raise ValueError('early')"),
    # warmup 2, measure 5, profiler warmup 1, profile 2: step 10 is the last profiled one
    "mid": dict(hook="if it == 10: raise ValueError('boom')"),
    "exit2": dict(hook="sys.exit(2)"),
    "short": dict(hook="if it > 9: break"),
    "kill9": dict(hook="if it == 4: os.kill(os.getpid(), 9)"),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """All scenarios run once, in parallel (most of them wait on purpose)."""
    tmp = tmp_path_factory.mktemp("fail")
    jobs = {}
    for name, sc in SCENARIOS.items():
        sc = dict(sc)
        script = train_script(tmp / name / "train.py", hook=sc.pop("hook"))
        jobs[name] = dict(script=script, argv=["train.py"], cwd=str(tmp / name),
                          run_dir=str(tmp / name / "run"), **sc)
    done = run_many(jobs, tmp / "drivers", workers=4)
    out = {}
    for name, (res, o, e) in done.items():
        assert res["status"] == "incomplete", name
        assert len(res["incomplete_reasons"]) == 1 and "\n" not in res["incomplete_reasons"][0]
        out[name] = (res, o, e, _child_json(jobs[name]["run_dir"]))
    return out


def test_raises_before_first_step(runs):
    res, out, err, child = runs["early"]
    assert res["incomplete_reasons"] == ["script raised ValueError: early before the first step"]
    assert res["exit"]["code"] == 1 and child["stage"] == "started"
    assert err.rstrip().endswith("ValueError: early")
    assert child["config"]["dataloader"]["value"]["batch_size"] == 8  # what was seen is kept


def test_raises_mid_run(runs):
    res, out, err, child = runs["mid"]
    assert res["incomplete_reasons"] == ["script raised ValueError: boom at step 10"]
    assert res["exit"]["code"] == 1 and res["steps_seen"] == 9
    # timed steps done; the interrupted profile still wrote its trace (what was captured is kept)
    assert child["stage"] == "timed" and len(child["step_times_ms"]) == 5
    assert len(child["trace_files"]) == 1
    assert len(child["losses"]) == 9 and child["batch_size"] == 8
    assert child["exit"]["exception"] == "ValueError: boom"
    # the traceback is the script's own: no advisor frame in it
    assert "advisor" not in err and 'train.py", line' in err


def test_a_script_that_ends_with_enough_steps_but_an_open_window_is_not_said_to_be_short():
    """40 steps where 29 were planned, but each so fast that the timed window's minimum time was
    not up when the script ended (a trial's preload on a one-epoch script): the reason says so,
    not "fewer than 29"."""
    from advisor.runner.parent import _reasons

    r = {"exit": {"code": 0, "exception": None}, "steps_seen": 40, "stage": "finished-early"}
    assert _reasons(r, 29, None, False, False) == [
        "script finished after 40 steps, before advisor's timed window had run its minimum time "
        "(stage 'finished-early')"]


def test_exit_code_early(runs):
    res, out, err, child = runs["exit2"]
    assert res["incomplete_reasons"] == ["script exited with code 2 before the first step"]
    assert res["exit"]["code"] == 2 and child["exit"]["code"] == 2


def test_finishes_early(runs):
    res, out, err, child = runs["short"]
    assert res["incomplete_reasons"] == [
        "script finished after 9 steps, fewer than warmup+measure+profile=10"]
    assert res["exit"]["code"] == 0 and child["stage"] == "finished-early"
    assert len(child["step_times_ms"]) == 5  # the timed steps (3-7) were complete
    assert len(child["trace_files"]) == 1  # and the profile that had started was saved


def test_never_reaches_a_step(runs):
    res, out, err, child = runs["nostep"]
    assert res["incomplete_reasons"] == ["never reached a training step within 15 s"]
    assert res["exit"]["code"] == -2 and res["exit"]["signal"] == 2  # SIGINT, then it saved
    assert child["exit"]["exception"] == "KeyboardInterrupt" and child["steps_seen"] == 0
    assert "time.sleep(120)" in err  # the user sees where it hung
    # stopped by the first-step limit (not the run's 60 s timeout), with SIGINT, and it saved:
    # the reason, the exit and the child's record say so; how long it took is not asserted
    assert res["interrupted"] is False and res["stalled"] is False


def test_a_stall_mid_run_is_stopped_with_every_threads_stack(runs):
    res, out, err, child = runs["stall"]
    reason = res["incomplete_reasons"][0]
    assert reason.startswith("stalled: no progress (no training step, forward, batch or backward) for 3 s "
                             "after step 8 (its median step: "), reason
    assert res["stalled"] and res["interrupted"] is False  # the stall limit stopped it, not the 150 s timeout
    assert res["exit"]["code"] == -2 and child["exit"]["exception"] == "KeyboardInterrupt"
    assert child["steps_seen"] == 8 and child["step_times_ms"]   # what was measured is kept
    stacks_path = reason.rsplit(" ", 1)[1]            # <dir>/run/stacks.txt, the script in <dir>
    hook = line_of(os.path.join(os.path.dirname(os.path.dirname(stacks_path)), "train.py"), "time.sleep(600)")
    stacks = open(stacks_path).read()
    assert f'train.py", line {hook} in <module>' in stacks, stacks
    assert "time.sleep(600)" in err   # the interrupt's traceback names the line too


def test_hangs_mid_run(runs):
    res, out, err, child = runs["hang"]
    assert res["incomplete_reasons"] == [f"timed out after {HUNG_S} s"]
    assert res["steps_seen"] == 3 and child["steps_seen"] == 3
    # stopped with SIGINT and saved within the grace period (no SIGKILL): the exit says so
    assert res["exit"]["code"] == -2 and child["exit"]["exception"] == "KeyboardInterrupt"
    assert not res["stalled"]


def test_hang_ignoring_sigint_is_killed(runs):
    res, out, err, child = runs["deaf"]
    assert res["incomplete_reasons"] == [f"timed out after {HUNG_S} s"]
    assert res["exit"]["code"] == -9
    assert child["stage"] == "warmup" and res["steps_seen"] == 1


def test_killed_by_signal(runs):
    res, out, err, child = runs["kill9"]
    assert res["incomplete_reasons"] == ["killed by signal 9 (SIGKILL) at step 4"]
    assert res["exit"]["code"] == -9 and res["exit"]["signal"] == 9
    assert res["steps_seen"] == 3  # from progress.jsonl: child.json was last saved earlier
    assert child["stage"] in ("warmup", "timed")


@pytest.mark.parametrize("what", ["missing", "syntax"])
def test_run_child_never_raises_on_bad_scripts(tmp_path, capfd, what):
    from test_runner_support import spec_for

    from advisor.runner.parent import run_child

    script = str(tmp_path / "gone.py")
    if what == "syntax":
        script = write(tmp_path / "bad.py", "def (\n")
    res = run_child(spec_for(script, [os.path.basename(script)], str(tmp_path), str(tmp_path / "r")),
                    timeout=60, step_timeout=30)
    capfd.readouterr()
    assert res["status"] == "incomplete"
    assert res["exit"]["code"] in (1, 2)
    assert res["incomplete_reasons"][0].startswith(
        "script exited with code 2" if what == "missing" else "script raised SyntaxError")


def test_ctrl_c_forwarded(tmp_path):
    """SIGINT to the parent (what Ctrl-C in the terminal does): forwarded to the child, which
    saves; run_child returns with interrupted=True."""
    import signal
    import subprocess
    import sys

    from test_runner_support import REPO, spec_for

    script = train_script(tmp_path / "train.py", hook="if it == 3: time.sleep(120)")
    spec = spec_for(script, ["train.py"], str(tmp_path), str(tmp_path / "run"))
    out = tmp_path / "result.json"
    driver = write(tmp_path / "driver.py", f"""
        import json, sys
        sys.path.insert(0, {REPO!r})
        from advisor.runner.parent import run_child
        r = run_child({spec!r}, timeout=60, step_timeout=30,
                      on_progress=lambda s, n, i: print("PROGRESS", s, n, flush=True))
        json.dump(r, open({str(out)!r}, "w"))
    """)
    p = subprocess.Popen([sys.executable, driver], stdout=subprocess.PIPE, text=True)
    for line in p.stdout:
        if line.startswith("PROGRESS warmup 2"):
            break
    p.send_signal(signal.SIGINT)
    p.stdout.read()
    assert p.wait(timeout=30) == 0
    res = json.loads(out.read_text())
    assert res["interrupted"] is True and res["status"] == "incomplete"
    assert res["incomplete_reasons"] == ["interrupted (Ctrl-C) at step 3"]
    assert res["exit"]["code"] == -2 and res["exit"]["exception"] == "KeyboardInterrupt"
    assert res["steps_seen"] == 2


def test_a_child_started_with_sigint_ignored_still_saves_when_advisor_stops_it(tmp_path):
    """A shell starts a background job (`advisor analyze ... &`, a CI step run so) with SIGINT
    ignored, and every process under it inherits that. advisor stops the script with SIGINT:
    the child takes it back, so a script that never reaches a step is stopped and saves (exit
    by SIGINT), not killed 5 s later with nothing saved."""
    import signal
    import subprocess
    import sys

    from test_runner_support import REPO, spec_for

    script = train_script(tmp_path / "train.py", hook="time.sleep(120)")
    spec = spec_for(script, ["train.py"], str(tmp_path), str(tmp_path / "run"))
    out = tmp_path / "result.json"
    driver = write(tmp_path / "driver.py", f"""
        import json, signal, sys
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # as a background job's
        sys.path.insert(0, {REPO!r})
        from advisor.runner.parent import run_child
        r = run_child({spec!r}, timeout=60, step_timeout=3)
        json.dump(r, open({str(out)!r}, "w"))
    """)
    p = subprocess.run([sys.executable, driver], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    res = json.loads(out.read_text())
    assert res["incomplete_reasons"] == ["never reached a training step within 3 s"]
    assert res["exit"]["code"] == -2 and res["exit"]["signal"] == 2, res["exit"]
    child = _child_json(str(tmp_path / "run"))
    assert child["exit"]["exception"] == "KeyboardInterrupt"


def test_the_first_cuda_init_is_timed_and_the_original_put_back(monkeypatch):
    """startup cuda_init/cuda_ready: torch calls torch.cuda._lazy_init by name on first CUDA
    use; advisor's wrapper notes both times once, then gets out of the way."""
    import torch.cuda as tc

    from advisor.runner import session

    state = {"init": False, "calls": 0}

    def fake_lazy_init():
        state["calls"] += 1
        state["init"] = True

    monkeypatch.setattr(tc, "is_initialized", lambda: state["init"])
    monkeypatch.setattr(tc, "_lazy_init", fake_lazy_init)
    startup = {}
    session._time_cuda_init(startup)
    assert tc._lazy_init is not fake_lazy_init
    tc._lazy_init()
    assert state["calls"] == 1 and startup["cuda_init"] <= startup["cuda_ready"]
    assert tc._lazy_init is fake_lazy_init  # restored after the first init


@pytest.mark.parametrize("name, kind, needle", [
    ("early", "script", "raise ValueError('early')"), ("mid", "script", "raise ValueError('boom')"),
    ("exit2", "script", "sys.exit(2)"), ("kill9", "environment", None), ("nostep", "environment", None),
    ("stall", "environment", None), ("hang", "environment", None), ("deaf", "environment", None),
    ("short", "advisor", None)])
def test_each_failure_is_named_the_scripts_at_its_line(runs, name, kind, needle):
    """advisor.failures on the same runs: the script's own error (raised, or a non-zero exit)
    placed at its line with the line quoted; killed by a signal or stopped at a limit, the
    environment's; a run too short for the window advisor planned, advisor's."""
    from advisor import failures

    res, out, err, child = runs[name]
    f = failures.of_process(res)
    assert f["kind"] == kind, f
    if needle is not None:
        assert f["where"].startswith("train.py:") and needle in f["line"], f
        assert f["traceback"][-1].endswith(f["line"]) and not any("advisor/" in t for t in f["traceback"])
    if kind == "environment":
        assert f["message"] == res["incomplete_reasons"][0] or f["message"].startswith("killed by signal 9 (SIGKILL")
