"""One-off costs against what a fix saves a step, over the user's run (advisor.payback): the
trial's one_off_s and break_even_steps, the run's length, the end-to-end projection, and a kept
fix left out of fixes.patch when the run is too short to pay it back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor import measure, payback

REPO = Path(__file__).resolve().parent.parent
SHORT = REPO / "tests" / "fixtures" / "scripts" / "short_preload.py"
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def _child(step_ms: float, first_step_s: float, batch: int = 8, warmup=(), held: float | None = None) -> dict:
    """A run whose script started at t=10 s and ended its first step first_step_s later."""
    startup = {"spawned": 9.0, "script": 10.0, "first_step": 10.0 + first_step_s}
    if held is not None:     # started ahead: held at its first CUDA use for `held` seconds
        startup.update(held=10.5, released=10.5 + held)
        startup["first_step"] += held
    return {"status": "complete", "batch_size": batch, "step_times_ms": [step_ms] * 10,
            "measure_window_ms": step_ms * 10, "startup": startup,
            "warmup_step_times_ms": [first_step_s * 1e3, *warmup]}


def test_the_lead_in_counts_the_work_before_the_steady_step_not_a_hold():
    base = _child(100.0, 2.0)
    assert measure.lead_in_s(base) == pytest.approx(1.9)                    # 2 s to the first step, less one step
    compiled = _child(50.0, 20.0, warmup=[550.0, 50.0])                     # a compile, then a slow warm-up step
    assert measure.lead_in_s(compiled) == pytest.approx(20.0 - 0.05 + 0.5)
    assert measure.lead_in_s(_child(100.0, 2.0, held=30.0)) == pytest.approx(1.9)   # its wait is not work
    assert measure.lead_in_s({"step_times_ms": [1.0]}) is None              # no start-up noted


def test_one_off_cost_and_break_even_against_the_baseline():
    base, trial = _child(100.0, 2.0), _child(50.0, 12.0)   # 10 s more up front, half the step
    assert measure.one_off_s(trial, base) == pytest.approx(10.05)
    assert measure.saved_per_step_s(trial, base) == pytest.approx(0.05)
    assert measure.break_even_steps(10.05, 0.05) == 201
    assert measure.break_even_steps(-0.3, 0.05) == 0          # cheaper to start: paid back at once
    assert measure.break_even_steps(10.0, -0.01) is None      # slower: never paid back
    # a bigger batch: the saving is counted on the baseline step's samples
    doubled = _child(150.0, 2.0, batch=16)                    # 16 samples in 150 ms: 8 in 75 ms
    assert measure.saved_per_step_s(doubled, base) == pytest.approx(0.025)
    rec = measure.trial_figures(trial, None, base)
    assert rec["one_off_s"] == pytest.approx(10.05) and rec["break_even_steps"] == 201


def _rec(fix: str, one_off: float, saved: float) -> dict:
    return {"name": f"01-{fix}", "fix": fix, "status": "accepted", "one_off_s": one_off, "saved_per_step_s": saved}


def test_a_fix_not_paid_back_within_the_run_is_named_with_its_own_cost():
    """Costs and savings are cumulative along the stack: each fix is judged on its own share."""
    workers = _rec("dataloader-workers", 1.0, 0.040)            # 1 s, 40 ms a step: pays back in 25 steps
    compiled = _rec("torch-compile", 21.0, 0.050)               # 20 s more for 10 ms more a step
    stack = [{"name": "dataloader-workers"}, {"name": "torch-compile"}]
    trials = [{"name": "00-baseline-repeat", "status": "reference"}, workers, compiled]
    records = payback.kept_records(trials, stack)
    assert records == [workers, compiled]
    assert payback.unpaid(records, None) == {}                  # the run's length unknown: nothing left out
    left = payback.unpaid(records, {"steps": 500, "source": "--run-steps"})
    assert list(left) == ["torch-compile"] and "20.0 s" in left["torch-compile"] and "500 steps" in left["torch-compile"]
    assert payback.unpaid(records, {"steps": 5000, "source": "--run-steps"}) == {}


def test_the_end_to_end_projection_counts_one_off_costs():
    base = _child(100.0, 2.0)
    kept = {"one_off_s": 10.0, "saved_per_step_s": 0.05}
    e2e = payback.end_to_end(base, kept, {"steps": 100, "source": "--run-steps"})
    assert e2e["baseline_s"] == pytest.approx(1.9 + 10.0) and e2e["patched_s"] == pytest.approx(1.9 + 10 + 5.0)
    assert e2e["speedup"] < 1                                   # too short: slower end to end
    long = payback.end_to_end(base, kept, {"steps": 10_000, "source": "--run-steps"})
    assert long["speedup"] > 1.5
    assert payback.end_to_end(base, kept, None) is None
    assert payback.run_length({}, 40) == {"steps": 40, "source": "--run-steps"}
    ended = {"exit": {"code": 0}, "steps_seen": 29}
    assert payback.run_length(ended, None)["steps"] == 29
    assert payback.run_length({**ended, "exit": {"code": 0, "stopped_by_advisor": True}}, None) is None


def test_a_short_job_gets_no_preload_it_cannot_pay_back(tmp_path):
    """Preloading makes each step of this job much faster, but costs more up front than its 40
    steps save: the trial keeps it, fixes.patch leaves it out and says why, and the projection of
    the whole run does not get slower. 1,500 samples of 10 ms: a 15 s one-off against about 5 s
    the 40 steps save (with 600, 6 s against a saving that a loaded host's slower baseline
    raised to 5.2 s: paid back within the lead-in's noise)."""
    r = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--out", str(tmp_path / "run"),
                        "--fix", "preload-dataset", "--run-steps", "40", "--warmup", "3", "--steps", "8",
                        "--min-time", "0", "--profile-steps", "1", str(SHORT), "--steps", "400", "--samples", "1500", "--sleep-ms", "10"],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["run_length"] == {"steps": 40, "source": "--run-steps"}
    pre = next(t for t in doc["trials"] if t["fix"] == "preload-dataset")
    assert pre["status"] == "accepted", pre["reason"]
    assert pre["one_off_s"] > 40 * pre["saved_per_step_s"] and pre["break_even_steps"] > 40
    patch = doc["patch"]
    assert "preload-dataset" in patch["left_out"] and "not paid back" in patch["left_out"]["preload-dataset"]
    assert not any(n.get("intervention") == "preload-dataset" for n in patch.get("notes") or [])
    assert not (tmp_path / "run" / "fixes.patch").exists()
    assert patch["end_to_end"]["patched_s"] <= patch["end_to_end"]["baseline_s"]
    assert "left out of fixes.patch: preload-dataset" in r.stderr


def test_a_run_of_a_few_epochs_gets_its_length_from_the_loader_and_the_epoch_loop(tmp_path):
    """No --run-steps: the length is len(loader) × the epochs of the loop around the training
    loop (a Trainer's method, range(start_epoch, self.epochs)); preloading reads far more than
    the two short epochs draw, so the patch leaves it out, and the report's break-even is in
    epochs too."""
    script = REPO / "tests" / "fixtures" / "scripts" / "short_epochs.py"
    r = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--out", str(tmp_path / "run"),
                        "--fix", "preload-dataset", "--warmup", "3", "--steps", "8", "--min-time", "0",
                        "--profile-steps", "1", str(script)],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["config"]["epochs"]["value"] == {"epochs": 2, "expr": "range(start_epoch, self.epochs)"}
    assert doc["config"]["epochs"]["where"].endswith("short_epochs.py:30")
    assert doc["run_length"]["steps"] == 50 and doc["run_length"]["source"].startswith("len(loader) 25 × 2 epochs")
    assert doc["measurement"]["steps_per_epoch"] == 25
    pre = next(t for t in doc["trials"] if t["fix"] == "preload-dataset")
    assert pre["status"] == "accepted" and pre["break_even_steps"] > 50
    assert "not paid back within the run's 50 steps" in doc["patch"]["left_out"]["preload-dataset"]
    assert doc["patch"]["end_to_end"]["patched_s"] <= doc["patch"]["end_to_end"]["baseline_s"]
    html = (tmp_path / "run" / "index.html").read_text()
    assert f"{pre['break_even_steps']:,} steps ({pre['break_even_steps'] / 25:,.1f} epochs)" in html


def test_the_break_even_reads_in_steps_and_epochs_never_or_nothing_to_pay():
    from advisor.report.view import break_even_text

    assert break_even_text({"break_even_steps": 1200, "one_off_s": 3.0}, 500) == "1,200 steps (2.4 epochs)"
    assert break_even_text({"break_even_steps": 1200, "one_off_s": 3.0}, None) == "1,200 steps"
    assert break_even_text({"break_even_steps": 0, "one_off_s": -0.2}, 500) == "0 steps"
    assert break_even_text({"break_even_steps": None, "one_off_s": 3.0, "status": "accepted"}, 500) == "never"
    assert break_even_text({"break_even_steps": None, "one_off_s": None}, 500) == "–"


def test_the_patch_stands_for_the_kept_fixes_less_a_left_out_one_between_them():
    """A Hugging Face Trainer's ladder (H200): amp, then compile, then workers on top of the
    compile. Compile is left out (not paid back in 1,200 steps): no run timed amp + workers, so
    the patch's rate is the baseline step less amp's and workers' own savings, and the one-off
    cost theirs; compile's saving and cost are not in it."""
    base = _child(65.3, 5.0, batch=32)   # 490 samples/s
    records = [{"fix": "amp", "one_off_s": 2.5, "saved_per_step_s": 0.0190, "samples_per_s": 691.0},
               {"fix": "torch-compile", "one_off_s": 42.8, "saved_per_step_s": 0.0437, "samples_per_s": 1480.0},
               {"fix": "dataloader-workers", "one_off_s": 44.3, "saved_per_step_s": 0.0463, "samples_per_s": 1679.0}]
    rec = payback.patched_record(records, {"torch-compile": "not paid back"}, base)
    assert rec["estimated"].startswith("without torch-compile")
    assert rec["saved_per_step_s"] == pytest.approx(0.0190 + 0.0026)
    assert rec["one_off_s"] == pytest.approx(2.5 + 1.5)
    assert rec["samples_per_s"] == pytest.approx(32 / (0.0653 - 0.0216), rel=1e-3)   # ~732, not 1,679
    # a left-out fix after the last kept one: that kept record was timed as it is
    assert payback.patched_record(records, {"dataloader-workers": "x"}, base) is records[1]
    assert payback.patched_record(records, {}, base) is records[2]
