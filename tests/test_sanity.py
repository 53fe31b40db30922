"""Measurement sanity (advisor.trials.sanity): a baseline and its repeat 10x apart are a failed
measurement, not noise: advisor says why, times the reference again, and judges fixes against
the runs that agree, or says the host is too noisy to judge any."""

from __future__ import annotations

import pytest

from advisor.report.outcome import outcome_lines
from advisor.trials import sanity
from tests.test_trials_ladder import _finding, _rec, _timed, ladder


def test_runs_that_agree_are_kept_and_one_outlier_is_left_out():
    a, b, c = _timed(100.0), _timed(104.0), _timed(1000.0)
    assert sanity.settle([a, b]) == ([a, b], None, pytest.approx(0.04))
    kept, left, noise = sanity.settle([c, a, b])
    assert kept == [a, b] and left is c and noise == pytest.approx(0.04)
    assert sanity.settle([c, a]) == ([c, a], None, None)                 # two runs: no majority
    assert sanity.settle([_timed(10.0), _timed(100.0), _timed(1000.0)])[2] is None


def test_the_cause_is_read_from_the_step_times_and_the_host(monkeypatch):
    monkeypatch.setattr(sanity, "load_average", lambda: 7.5)
    warming = {**_timed(10.0), "step_times_ms": [90.0, 80.0, 70.0, 12.0, 10.0, 10.0, 10.0, 10.0, 10.0]}
    one_off = {**_timed(10.0), "step_times_ms": [10.0] * 8 + [400.0]}
    why = sanity.diagnose([("the baseline", warming), ("its repeat", one_off)], cpu_count=2)
    assert "the baseline's timed window was still warming up (its first steps 80.0 ms, its last 10.0 ms)" in why
    assert "one step of 400.0 ms inside its repeat's window (its median 10.0 ms)" in why
    assert "the host is loaded (load average 7.5 on 2 cores)" in why
    monkeypatch.setattr(sanity, "load_average", lambda: 0.1)
    assert sanity.diagnose([("the baseline", _timed(10.0))], cpu_count=2).startswith("nothing in the runs'")


def test_a_baseline_ten_times_slower_than_its_repeat_is_timed_again_and_left_out(tmp_path):
    """Baseline 1000 ms, repeat 100 ms: not "noise 900%, accepted above 1800%". The reference
    is timed again, agrees with the repeat, the baseline is left out of the reference, and the
    fix is judged at the noise of the runs that agree."""
    speeds = {(): [100.0, 104.0], ("set-to-none",): [50.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 10.0)], baseline=_timed(1000.0))
    assert [c[0] for c in calls] == ["00-baseline-repeat", "00-baseline-repeat-2", "01-set-to-none"]
    assert result["noise"] == pytest.approx(0.04) and result["threshold"] < 0.1
    assert "timed again, the baseline left out, the runs agree within 4.0%" in result["settled"]
    assert "900%" in _rec(result, "00-baseline-repeat")["reason"] and "beyond any run-to-run noise" in \
        _rec(result, "00-baseline-repeat")["reason"]
    assert _rec(result, "01-set-to-none")["status"] == "accepted"


def test_runs_that_never_agree_stop_the_trials_and_say_so(tmp_path):
    speeds = {(): [10.0, 300.0, 40.0], ("set-to-none",): [50.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 10.0)], baseline=_timed(1000.0))
    assert [c[0] for c in calls] == ["00-baseline-repeat", "00-baseline-repeat-2", "00-baseline-repeat-3"]
    text = result["unsettled"]
    assert text.startswith("the host is too noisy to judge fixes: the same script measured the baseline 1000.0 ms, "
                           "its repeat 10.0 ms, 00-baseline-repeat-2 300.0 ms, 00-baseline-repeat-3 40.0 ms a step")
    assert result["stack"] == [] and result["threshold"] is None
    doc = {"findings": [{"severity": "warning"}], "trials": result["trials"],
           "trial_summary": {"unsettled": text}}
    assert outcome_lines(doc)[1] == f"kept: nothing: {text}"


def test_trials_the_user_named_run_even_on_a_host_too_noisy_to_judge(tmp_path):
    """--fix names the trials to run: they run, judged at the noise of every reference run,
    and the result still says the host was too noisy."""
    speeds = {(): [10.0, 300.0, 40.0], ("set-to-none",): [1.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 10.0)], baseline=_timed(1000.0),
                              only={"set-to-none"})
    assert [c[0] for c in calls][-1] == "01-set-to-none"
    assert "the trials --fix names ran anyway, judged at that noise" in result["unsettled"]
    assert result["threshold"] > 1.0 and result["noise"] > sanity.IMPLAUSIBLE


def test_a_reference_is_timed_again_only_where_the_budget_has_room(tmp_path, monkeypatch):
    """Each process takes 10 s and the budget's planned end is 45 s in, 30 s gone when the
    repeat ends: a re-timing (and the verification after it) would end past it, so none starts;
    the result says the budget left no room. On a CPU host loaded 9 deep one re-timing ran 200 s
    past a 4-minute budget."""
    import time

    from advisor import trials
    from tests.test_trials_ladder import _elapsed

    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    speeds = {(): [_elapsed(10.0), _elapsed(300.0)], ("set-to-none",): [_elapsed(5.0)]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 10.0)],
                              baseline={**_elapsed(1000.0)}, budget_s=45.0 / trials.planned_end(1.0), clock=clock)
    assert [c[0] for c in calls] == ["00-baseline-repeat"]
    assert _rec(result, "00-baseline-repeat-2") == {"name": "00-baseline-repeat-2", "fix": "baseline (repeat)",
                                                    "status": "not run", "reason": "trial budget spent",
                                                    "interventions": []}
    assert "the budget left no room to time it again" in result["unsettled"]


def test_the_repeat_starts_only_where_it_ends_inside_the_budget(tmp_path, monkeypatch):
    """The baseline's stage took 20 s and each process takes 10 s. With the budget's planned
    end 25 s in, the repeat would end past it: it does not start, says why, and no trial runs
    (none fits). At 45 s it runs. On a CPU host loaded 9 deep a repeat started after a baseline
    that had spent the budget took the analyze to 758 s of 240."""
    import time

    from advisor import trials
    from tests.test_trials_ladder import _elapsed

    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    speeds = {(): [_elapsed(10.0)], ("set-to-none",): [_elapsed(5.0)]}
    clock = [1000.0]
    result, calls, lines = ladder(tmp_path, speeds, [_finding("set-to-none", 10.0)], baseline=_elapsed(10.0),
                                  budget_s=25.0 / trials.planned_end(1.0), clock=clock)
    assert calls == []
    repeat = _rec(result, "00-baseline-repeat")
    assert repeat["status"] == "not run" and repeat["reason"] == (
        "not timed again: the baseline's stage took 20 s of the 26 s budget, no room for its repeat "
        "(10 s a process); --budget 1 gives it and a trial room")
    assert repeat["reason"] in lines
    assert _rec(result, "set-to-none")["status"] == "not run" and result["noise"] is None
    clock = [1000.0]
    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 10.0)], baseline=_elapsed(10.0),
                              budget_s=45.0 / trials.planned_end(1.0), clock=clock)
    assert [c[0] for c in calls][:1] == ["00-baseline-repeat"]
    assert _rec(result, "00-baseline-repeat")["status"] == "reference"
