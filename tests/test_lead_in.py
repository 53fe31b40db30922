"""The lead-in from one origin (measure.lead_in_s, runner/startup.py): the same start-up reads the
same however its process was started (cold, from a spare, held at its first CUDA use or in its
warm-up, stopped while another trial was timed, niced beside it), and the one-off costs are
judged against the lead-in's noise (advisor.costs, advisor.payback).

The arithmetic on synthetic child records (the unit the runner writes), then real processes:
one script started cold and on a guess that is stopped, held, starved of its core and
advanced, whose lead-ins agree within the noise while their wall times do not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from test_runner_support import spec_for, wait_until, write

from advisor import costs, measure, payback
from advisor.runner.startup import cpu_wait_s

T0 = 1_000.0   # the script's first line, in wall time


def _child(first_s: float, *, step_ms: float = 100.0, warmup=(), holds=(), stopped=(), cpu_wait=None,
           **startup) -> dict:
    """A run whose script started at T0 and ended its first step ``first_s`` of wall time later."""
    at = {"spawned": T0 - 1.0, "script": T0, "first_step": T0 + first_s, **startup}
    if holds:
        at["holds"] = [list(h) for h in holds]
    if stopped:
        at["stopped"] = [list(s) for s in stopped]
    if cpu_wait is not None:
        at["cpu_wait"] = {"script": 5.0, "first_step": 5.0 + cpu_wait}
    return {"status": "complete", "batch_size": 8, "step_times_ms": [step_ms] * 10,
            "measure_window_ms": step_ms * 10, "startup": at, "warmup_step_times_ms": [first_s * 1e3, *warmup]}


def test_every_way_a_process_starts_reads_the_same_lead_in():
    """2 s of the script's own work before its first step ends, whatever else its wall time held."""
    cold = _child(2.0)
    held = _child(32.0, holds=[(T0 + 0.5, T0 + 30.5)])                          # waited 30 s at its first CUDA use
    stopped = _child(7.0, stopped=[(T0 - 3.0, T0 - 1.0), (T0 + 0.2, T0 + 5.2)])  # a stop before its spec, one in it
    starved = _child(6.0, cpu_wait=4.0)                                          # niced beside a trial: 4 s without a core
    both = _child(39.0, holds=[(T0 + 1.0, T0 + 31.0)], stopped=[(T0 + 20.0, T0 + 35.0)], cpu_wait=3.0)  # a stop in the hold
    for child in (held, stopped, starved, both):
        assert measure.lead_in_s(child) == pytest.approx(measure.lead_in_s(cold)) == pytest.approx(1.9)
        assert measure.one_off_s(child, cold) == pytest.approx(0.0, abs=1e-9)


def test_a_guess_held_twice_leaves_out_both_waits_and_no_more():
    """Held at its first CUDA use, advanced into its warm-up, held again before its last warm-up
    steps: the first wait is in its first step's wall time, the second after it. Before both
    waits were noted, the first counted as work and the second was taken from the first step."""
    first_wait, second_wait = (T0 + 0.5, T0 + 20.5), (T0 + 23.0, T0 + 33.0)
    advanced = _child(22.0, holds=[first_wait, second_wait], held=second_wait[0], released=second_wait[1])
    assert measure.lead_in_s(advanced) == pytest.approx(2.0 - 0.1)
    # the record written before the holds were noted: its one hold is held-released
    legacy = _child(32.0, held=T0 + 0.5, released=T0 + 30.5)
    assert measure.lead_in_s(legacy) == pytest.approx(1.9)


def test_a_stop_during_a_warm_up_step_is_no_part_of_its_warm_up_cost():
    """Side by side, a process in its warm-up is stopped while another's window is open: the
    stop is left out of the step it fell in, and so is the step's wait for a core."""
    ends = [T0 + 2.0, T0 + 2.6, T0 + 5.7, T0 + 5.8]
    child = _child(2.0, warmup=[600.0, 3100.0, 100.0], stopped=[(T0 + 2.7, T0 + 5.2)])
    child["warmup_step_ends"] = ends
    child["warmup_step_cpu_wait"] = [5.0, 5.0, 5.1, 5.1]
    # 500 ms of compile in the second step; the third: 3.1 s, less the 2.5 s stop and 0.1 s without a core
    assert measure.warmup_cost_s(child) == pytest.approx(0.5 + 0.4)
    plain = _child(2.0, warmup=[600.0, 3100.0, 100.0])     # nothing noted: as measured
    assert measure.warmup_cost_s(plain) == pytest.approx(0.5 + 3.0)


def _rec(name: str, fix: str, one_off: float, saved: float = 0.0, **kw) -> dict:
    return {"name": name, "fix": fix, "status": "accepted", "one_off_s": one_off, "saved_per_step_s": saved,
            "break_even_steps": measure.break_even_steps(one_off, saved), **kw}


def test_one_offs_are_measured_against_the_warm_repeat_and_the_baselines_cold_start_is_its_own():
    """The baseline is the one process started cold (an H200 run of timm's trainer: its repeat
    reached the first step 11.9 s sooner, all of it between CUDA's start and the first step).
    Every record's one-off is its lead-in less the repeat's; the cold start is reported apart."""
    base = _child(27.7)                        # lead-in 27.6 s, cold
    repeat = _rec("00-baseline-repeat", costs.REPEAT_FIX, -11.9, status="reference")
    workers = _rec("01-dataloader-workers", "dataloader-workers", -11.0, 0.01)
    compiled = _rec("02-torch-compile", "torch-compile", 20.0, 0.01)
    doc = {"trials": [repeat, workers, compiled]}
    costs.settle(doc, base)
    costs.settle(doc, base)                    # idempotent
    lead = doc["trial_summary"]["lead_in"]
    assert lead["cold_start_s"] == pytest.approx(11.9) and lead["warm_s"] == pytest.approx(15.7)
    assert lead["reference"] == "00-baseline-repeat" and lead["repeat_within_noise"] is True
    assert lead["expected_s"] == pytest.approx(1.57) and "note" not in lead     # 10% of the warm 15.7 s
    assert repeat["one_off_s"] == 0.0 and repeat["one_off_vs_baseline_s"] == -11.9
    assert workers["one_off_s"] == pytest.approx(0.9) and workers["one_off_within_noise"]
    assert workers["break_even_steps"] == 0
    assert compiled["one_off_s"] == pytest.approx(31.9) and not compiled["one_off_within_noise"]


def test_later_repeats_are_checked_against_the_noise_and_widen_it_when_they_fall_outside():
    base = _child(10.1)                        # lead-in 10 s
    first = _rec("00-baseline-repeat", costs.REPEAT_FIX, 0.0, status="reference")
    again = _rec("00-baseline-repeat-2", costs.REPEAT_FIX, 0.8, status="reference")
    doc = {"trials": [first, again]}
    costs.settle(doc, base)
    noise = doc["trial_summary"]["lead_in"]
    assert noise["expected_s"] == pytest.approx(1.0) and noise["noise_s"] == pytest.approx(1.0)   # 10% of 10 s
    assert noise["repeat_within_noise"] is True and "note" not in noise
    assert costs.lead_in_noise([first, again], _child(40.1))["expected_s"] == pytest.approx(4.0)
    assert costs.lead_in_noise([first, again], _child(2.1))["expected_s"] == pytest.approx(1.0)   # never under 1 s
    far = {**again, "one_off_s": 20.7, "one_off_vs_baseline_s": 20.7}   # a repeat started 20.7 s apart
    wide = costs.lead_in_noise([first, far], base)
    assert wide["repeat_within_noise"] is False and wide["noise_s"] == pytest.approx(20.7)
    assert "20.7 s apart" in wide["note"] and "beyond the 1.0 s expected" in wide["note"]
    none = costs.lead_in_noise([], base)       # no repeat: the baseline is the reference
    assert none["repeat_within_noise"] is None and "cold_start_s" not in none


def test_a_one_off_within_the_noise_has_nothing_to_pay_back():
    noise = {"baseline_s": 10.0, "expected_s": 1.0, "noise_s": 1.5}
    repeat = _rec("00-baseline-repeat", costs.REPEAT_FIX, 0.9, 0.002)     # 450 steps to pay back 0.9 s of noise
    compiled = _rec("03-torch-compile", "torch-compile", 30.0, 0.01)
    for rec in (repeat, compiled):
        costs.judge_one_off(rec, noise)
        costs.judge_one_off(rec, noise)        # idempotent
    assert repeat["one_off_within_noise"] and repeat["break_even_steps"] == 0 and repeat["one_off_s"] == 0.9
    assert not compiled["one_off_within_noise"] and compiled["break_even_steps"] == 3000
    assert compiled["one_off_noise_s"] == 1.5


def test_a_fix_is_left_out_only_when_its_one_off_beyond_the_noise_is_not_paid_back():
    """Costs and savings along the stack, each fix judged on its own share, with the noise its
    record carries: the workers' 1.5 s is noise; preload's own 7 s less 1.5 s is more than it
    saves over 40 steps; compile's own 3 s pays back in 40 steps within the noise only."""
    length = {"steps": 40, "source": "at most len(loader) 40 × 1 epochs", "at_most": True}
    workers = _rec("01-dataloader-workers", "dataloader-workers", 1.5, 0.150, one_off_noise_s=1.5)
    preload = _rec("02-preload-dataset", "preload-dataset", 8.5, 0.250, one_off_noise_s=1.5)   # own: 7 s, 0.1 s a step
    compiled = _rec("03-torch-compile", "torch-compile", 4.5, 0.205, one_off_noise_s=1.5)      # own: 3 s, 0.055 s a step
    shares = {s["fix"]: s for s in payback.shares([workers, preload, compiled], length)}
    assert shares["dataloader-workers"]["paid"] and shares["dataloader-workers"]["within_noise"]
    assert shares["dataloader-workers"]["break_even_steps"] == 0
    assert shares["preload-dataset"]["paid"] is False and shares["preload-dataset"]["one_off_s"] == pytest.approx(7.0)
    # judged on the stack before preload (workers): its own 3 s for 55 ms a step, 55 steps, more
    # than 40, but 3 s less 1.5 s is under the 2.2 s it saves over the run
    assert shares["torch-compile"]["one_off_s"] == pytest.approx(3.0)
    assert shares["torch-compile"]["paid"] and shares["torch-compile"]["within_noise"]
    assert shares["torch-compile"]["break_even_steps"] == 55
    left = payback.unpaid([workers, preload, compiled], length)
    assert list(left) == ["preload-dataset"]
    assert "7.0 s" in left["preload-dataset"] and "40 steps (at most" in left["preload-dataset"]
    assert "less the lead-in's noise (1.5 s)" in left["preload-dataset"]
    assert payback.shares([workers], None)[0]["paid"] is None     # no length: nothing judged


def test_a_rate_above_the_data_free_ceiling_makes_the_ceiling_no_bound():
    ceiling = {"name": "ceiling-data-free-01", "fix": "cached-batch", "status": "bound", "ceiling": True,
               "apart": True, "samples_per_s": 1374.0, "interventions": ["amp", "cached-batch"],
               "reason": "the kept stack's compute fixes, every batch one cached batch on the device: "
                         "no data fix can make the step faster than this"}
    workers = {"name": "01-dataloader-workers-2", "status": "accepted", "samples_per_s": 263.0,
               "interventions": ["amp", "dataloader-workers(num_workers=2)"], "reason": "+109.7%"}
    preload = {"name": "02-preload-dataset", "status": "accepted", "samples_per_s": 2575.0,
               "interventions": ["amp", "dataloader-workers(num_workers=2)", "preload-dataset"], "reason": "+877.3%"}
    compiled = {"name": "03-torch-compile", "status": "accepted", "samples_per_s": 5000.0,   # a compute fix the ceiling has not
                "interventions": ["amp", "dataloader-workers(num_workers=2)", "preload-dataset", "torch-compile"]}
    trials = [workers, ceiling, preload, compiled]
    assert costs.rates_above_ceiling(trials, threshold=0.38) == [preload]
    assert ceiling["status"] == "measured" and ceiling["above"] == ["02-preload-dataset"]
    assert "no data fix can" not in ceiling["reason"] and "one of the two measurements is wrong" in ceiling["reason"]
    assert "87% above" in ceiling["reason"]
    assert "above the data-free ceiling" in preload["reason"] and preload["reason"].startswith("+877.3%")
    assert "above_ceiling" not in compiled and "above_ceiling" not in workers
    # within the threshold it stays a bound
    close = [{**ceiling, "status": "bound"}, {**preload, "samples_per_s": 1600.0, "reason": "x"}]
    assert costs.rates_above_ceiling(close, threshold=0.38) == [] and close[0]["status"] == "bound"


STARTS = """
    import sys
    import time

    import torch

    print("making data", flush=True)
    t = time.process_time()
    while time.process_time() - t < 0.5:   # the script's own start-up: 0.5 s of CPU work
        pass
    try:
        torch.cuda.init()                  # its first CUDA use: where a guess waits
    except Exception:                      # a CPU-only host: the hold came first
        pass
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(100000):
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        time.sleep(0.005)
"""


def _spec(tmp_path, script, name):
    return spec_for(script, ["train.py"], str(tmp_path), str(tmp_path / "trials" / name), warmup_steps=4,
                    profile_steps=0, measure_steps=5, run_name=name, tb_dir=str(tmp_path / "tb"))


def _hog(cpu: int) -> subprocess.Popen:
    """A busy process at normal priority on one CPU."""
    return subprocess.Popen([sys.executable, "-c", f"import os; os.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])


def test_a_guess_stopped_held_twice_and_starved_of_its_core_reads_the_cold_lead_in(tmp_path):
    """One script, started cold, and on a guess (a spare with torch imported first): the guess is
    stopped for 2 s in its start-up, its main thread shares its one CPU with a busy process at the
    same priority, it waits at its first CUDA use, is advanced into its warm-up and waits
    again. Its wall time to the first step is seconds longer; its lead-in is the cold one's,
    within the lead-in's least noise."""
    from advisor.runner.ahead import HeldChild, WarmChild
    from advisor.runner.parent import run_child

    script = write(tmp_path / "train.py", STARTS)
    cold = run_child(_spec(tmp_path, script, "00-cold"), timeout=300, step_timeout=240)
    assert cold["status"] == "complete", cold["incomplete_reasons"]
    spec = _spec(tmp_path, script, "01-guess")
    held = HeldChild(spec, str(tmp_path / "trials" / ".ahead-1"), WarmChild(str(tmp_path)))
    progress = tmp_path / "trials" / ".ahead-1" / "progress.jsonl"
    hog = None
    try:
        wait_until(lambda: '"started"' in progress.read_text() or not held.alive(), "the guess's script started")
        starving = cpu_wait_s() is not None   # the kernel counts the wait for a core: show it is left out
        if starving:
            cpu = sorted(os.sched_getaffinity(held.proc.pid))[0]
            os.sched_setaffinity(held.proc.pid, {cpu})
            hog = _hog(cpu)
        held.pause()                       # as while another trial's steps are timed
        time.sleep(2.0)
        held.resume()
        wait_until(lambda: held.at_hold() or not held.alive(), "the guess held at its CUDA use")
        if hog is not None:
            hog.kill()
            hog.wait()
            hog = None
        time.sleep(1.0)                    # waiting at the hold
        assert held.advance()
        wait_until(lambda: held.at_hold() or not held.alive(), "the guess held again in its warm-up")
        time.sleep(1.0)
        res = run_child(spec, timeout=300, step_timeout=240, held=held)
    finally:
        if hog is not None:
            hog.kill()
        held.close()
    assert res["status"] == "complete" and res["started_held"], res["incomplete_reasons"]
    at = res["startup"]
    assert len(at["holds"]) == 2 and at["stopped"] and at["stopped"][0][1] - at["stopped"][0][0] >= 2.0

    # what its wall time held beside its work: stopped 2 s and held 1 s at least before its first step
    out = measure._covered(measure._spans(measure._holds(at), at["stopped"]), at["script"], at["first_step"])
    assert out >= 2.9, at
    if starving:
        # its 0.5 s of start-up work shared one core with a busy process at the same priority: the
        # kernel's fair share makes it wait about as long as it works (0.46 s on a quiet host)
        assert measure._cpu_wait(at, "script", "first_step") > 0.25, at
    assert abs(measure.lead_in_s(res) - measure.lead_in_s(cold)) <= costs.LEAD_NOISE_MIN_S, \
        (measure.lead_in_s(res), measure.lead_in_s(cold), at)


def test_the_report_reads_a_one_off_within_the_noise_as_nothing_to_pay_back():
    from advisor.report.view import break_even_text

    assert break_even_text({"break_even_steps": 0, "one_off_s": 0.9, "one_off_within_noise": True}, 40) == \
        "– (one-off within noise)"
    assert break_even_text({"break_even_steps": 0, "one_off_s": -0.2, "one_off_within_noise": False}, 40) == "0 steps"


def test_the_step_advisor_counted_flops_in_is_no_part_of_the_warm_up_cost():
    """The baseline counts FLOPs over one warm-up step (runner/flops.py), FlopCounterMode
    dispatching every op in Python: that step's time is advisor's, not the script's."""
    counted = _child(2.0, warmup=[100.0, 900.0, 150.0])
    counted["flops"] = {"per_step": 1e9, "step": 3, "why_not": None}    # warm-up step 3: the 900 ms one
    assert measure.warmup_cost_s(counted) == pytest.approx(0.05)
    assert measure.warmup_cost_s(_child(2.0, warmup=[100.0, 900.0, 150.0])) == pytest.approx(0.85)
