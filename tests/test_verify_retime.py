"""advisor.verify: a patched run that falls short of a stack timed once has the stack timed
again (advisor.pipeline._time_stack, a timing-only process with the run-time fixes): the two
stack runs are its reference, and their spread widens the band as the patched runs' own does."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from advisor import measure, specs
from advisor.pipeline import Analyze, StageOptions


def analyzed_slow_recipe(tmp_path: Path):
    """A copy of the slow-recipe fixture analyzed without trials, on this host: (the Analyze,
    its options, run.json's document, the baseline's child result)."""
    script = tmp_path / "slow_recipe.py"
    shutil.copy(Path(__file__).parent / "fixtures" / "scripts" / "slow_recipe.py", script)
    opts = specs.AnalyzeOptions(warmup=2, measure_steps=6, profile_steps=1)
    run_dir = tmp_path / "run"
    run = Analyze(str(script), ["--steps", "400"], run_dir, specs.make_spec(str(script), ["--steps", "400"], run_dir, opts),
                  opts, StageOptions(trials=False), progress=lambda s: None)
    doc, child = run.run()
    assert doc["status"] == "complete", doc.get("incomplete_reasons")
    return run, opts, doc, child


def test_a_short_verification_against_a_stack_timed_once_times_the_stack_again(tmp_path):
    run, opts, doc, child = analyzed_slow_recipe(tmp_path)
    run_dir = tmp_path / "run"
    rate = measure.samples_per_s(child)
    doc["trial_summary"] = {"threshold": 0.05}
    stack = [{"name": "set-to-none", "params": {}}]
    # one lucky run of the stack, ten times the rate set_to_none can give (twice was within a
    # loaded host's swings): the patched runs fall short of it, and the stack is timed again;
    # the reference is the mean of its two runs
    run._patch_and_verify(opts, doc, child, stack, 10.0 * rate, retime=True)
    v = doc["patch"]["verification"]
    assert v.get("stack_runs") == 2, v
    again = json.loads((run_dir / "verify" / "stack" / "child.json").read_text())
    assert again["stage"] == "measured"
    assert v["stack_samples_per_s"] == pytest.approx((10.0 * rate + measure.samples_per_s(again)) / 2)
    assert v["of_stack"] == pytest.approx(v["samples_per_s"] / v["stack_samples_per_s"])
    assert v["status"] in ("verified", "short"), v   # the verdict on these figures: status_of's tests
    # a stack timed more than once (no retime): the patched runs are held to its rate as it is
    stamp = (run_dir / "verify" / "stack" / "child.json").stat().st_mtime_ns
    run._patch_and_verify(opts, doc, child, stack, 2.0 * rate)
    v = doc["patch"]["verification"]
    assert "stack_runs" not in v and v["stack_samples_per_s"] == 2.0 * rate, v
    assert (run_dir / "verify" / "stack" / "child.json").stat().st_mtime_ns == stamp


def test_no_second_run_starts_that_would_end_past_the_budget(tmp_path):
    """With the budget all but spent, a patched run that falls short is not run again and the
    stack is not timed again: the verdict rests on the one run and the noise band, and says so."""
    run, opts, doc, child = analyzed_slow_recipe(tmp_path)
    run_dir = tmp_path / "run"
    doc["trial_summary"] = {"threshold": 0.05}
    run.budget_s = 1.0   # spent by the baseline's run already
    run._patch_and_verify(opts, doc, child, [{"name": "set-to-none", "params": {}}],
                          2.0 * measure.samples_per_s(child), retime=True)
    v = doc["patch"]["verification"]
    assert v["runs"] == 1 and "stack_runs" not in v and not (run_dir / "verify" / "stack").exists()
    assert v["timed_once"].startswith("a second run (") and v["timed_once"].endswith("would end past --budget")
    assert v["status"] == "short", v
