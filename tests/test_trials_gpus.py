"""Trials side by side on several GPUs (advisor.trials.gpus): which GPUs a machine offers, and
the ladder's processes scheduled over fake GPUs by an injected runner that sleeps instead of
training (no child process): each on a GPU of its own, the guesses running beside the trial the
ladder waits on, each GPU's offset from the first measured and applied beyond the noise."""

from __future__ import annotations

import json
import threading
import time

import pytest

from advisor import measure, specs, trials
from advisor.trials import gpus
from advisor.trials.process import Slot, TrialContext, _spec

SMI = """0, GPU-aaaa, 3
1, GPU-bbbb, 70000
2, GPU-cccc, 5
3, GPU-dddd, 0
"""


def test_the_visible_gpus_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert [g["id"] for g in gpus.visible(SMI)] == ["0", "1", "2", "3"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-dddd,7,0")   # CUDA stops at the unknown 7
    assert gpus.visible(SMI) == [{"id": "2", "used_mib": 5.0}, {"id": "GPU-dddd", "used_mib": 0.0}]


def test_idle_gpus_by_default_the_asked_ones_and_at_most_n(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    shown = gpus.visible(SMI)
    assert gpus.choose(shown) == ["0", "2", "3"]            # GPU 1 holds another process's 70 GB
    assert gpus.choose(shown, count=2) == ["0", "2"]
    assert gpus.choose(shown, asked="0,1") == ["0", "1"]    # asked for: used whatever it holds
    with pytest.raises(ValueError, match="no visible GPU 9"):
        gpus.choose(shown, asked="0,9")


@pytest.mark.parametrize("baseline,nproc,why", [
    ({"memory": {"capacity_bytes": 1}, "config": {"model": {"value": {"wrapper": "DataParallel"}}}}, 1, "DataParallel"),
    ({"memory": {}}, 1, "did not train on a GPU"),
    ({"memory": {"capacity_bytes": 1}}, 2, "several processes"),
])
def test_scripts_that_must_keep_one_gpu(baseline, nproc, why):
    assert why in gpus.why_one(baseline, nproc)
    assert gpus.plan(baseline, nproc)["gpus"] == []


def test_a_trial_on_a_gpu_of_its_own_names_it_before_the_script_runs(tmp_path):
    ctx = TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                       baseline={}, baseline_findings=[], environment={}, slot=Slot("3", None))
    assert _spec(ctx, "01-amp", [])["environ"]["CUDA_VISIBLE_DEVICES"] == "3"
    assert "CUDA_VISIBLE_DEVICES" not in _spec(TrialContext(
        script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(), baseline={},
        baseline_findings=[], environment={}), "01-amp", []).get("environ", {})


def _timed(ms: float, steps: int = 10) -> dict:
    return {"status": "complete", "batch_size": 8, "step_times_ms": [ms] * steps, "measure_window_ms": ms * steps,
            "losses": [2.0, 1.9, 1.8, 1.7]}


class FakeGpus(trials.TrialRunner):
    """Each process sleeps `hold` seconds and runs at its fixes' speed times its GPU's slowness;
    records the GPU it ran on and when."""

    def __init__(self, speeds: dict, slow: dict | None = None, hold: float = 0.15):
        self.speeds, self.slow, self.hold = speeds, slow or {}, hold
        self.runs: list[dict] = []
        self.lock = threading.Lock()

    def process(self, ctx, name, stack, profile=True, guesses=None):
        names = {p.name for c in stack for p in c.parts}
        start = time.monotonic()
        deadline = start + self.hold
        while time.monotonic() < deadline:   # stopped like a child that Ctrl-C reached
            # on a GPU of its own, by its slot's signals; run in the ladder's thread (every GPU
            # visible: no slot's GPU), by Ctrl-C itself, which its signals count in the main thread
            own_gpu = ctx.slot is not None and ctx.slot.gpu is not None
            cancelled = ctx.slot.cancel.count if own_gpu else ctx.interrupted and ctx.interrupted()
            if cancelled:
                with self.lock:
                    self.runs.append({"name": name, "gpu": ctx.slot.gpu if ctx.slot else None, "start": start,
                                      "end": time.monotonic(), "stopped": True})
                return {"status": "incomplete", "interrupted": True}, None, None
            time.sleep(0.01)
        with self.lock:
            self.runs.append({"name": name, "gpu": ctx.slot.gpu if ctx.slot else None, "start": start,
                              "end": time.monotonic(),
                              "env": _spec(ctx, name, stack, profile).get("environ", {}).get("CUDA_VISIBLE_DEVICES")})
        (ctx.run_dir / "trials" / name).mkdir(parents=True, exist_ok=True)   # what a real process leaves
        ms = 100.0 - sum(gain for fix, gain in self.speeds.items() if fix in names)
        return _timed(ms * self.slow.get(ctx.slot.gpu if ctx.slot else None, 1.0)), None, None

    def ceiling(self, after, name=None):
        return None


class WithCeiling(FakeGpus):
    """FakeGpus whose data-free ceiling runs its process as the real one does (trials.ceiling)."""

    def ceiling(self, after, name=None):
        return trials.TrialRunner.ceiling(self, after, name)


def _ladder(tmp_path, runner: FakeGpus, devices: list[str], findings: list[dict]):
    ctx = TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                       baseline=_timed(100.0), baseline_findings=findings, environment={},
                       progress=lambda s: None, runner=runner, gpus=devices)
    return trials.run_trials(ctx)


FINDINGS = [{"code": "ADV000", "estimated_gain_ms": g, "fix": {"intervention": f}}
            for f, g in (("set-to-none", 30.0), ("channels-last", 20.0), ("cudnn-benchmark", 10.0))]
SPEEDS = {"set-to-none": 40.0, "channels-last": 20.0, "cudnn-benchmark": 0.1}   # ms a step each saves of 100
KEPT = set(SPEEDS)   # set-to-none and cudnn-benchmark as one rung (cheap fixes go together), then channels-last


def _kept(result) -> set:
    return {s["name"] for s in result["stack"]}


def test_trials_run_side_by_side_each_on_a_gpu_of_its_own(tmp_path):
    runner = FakeGpus(SPEEDS)
    result = _ladder(tmp_path, runner, ["0", "1", "2"], FINDINGS)
    done = [r for r in runner.runs if not r.get("stopped")]
    # every process after the repeat named its GPU before its script ran, one of the three; the
    # repeat ran as the baseline did, every GPU visible (the process held since the baseline)
    names = {r["name"]: r for r in done}
    assert names["00-baseline-repeat"]["env"] is None and names["00-baseline-repeat"]["gpu"] is None
    assert all(r["env"] == r["gpu"] and r["gpu"] in ("0", "1", "2") for r in done if r["name"] != "00-baseline-repeat")
    # the baseline once on each other GPU, beside the repeat on the first
    assert {"00-baseline-gpu1", "00-baseline-gpu2"} <= set(names)
    assert next(t for t in result["trials"] if t["name"] == "00-baseline-repeat")["gpu"] == "0"
    # processes overlapped in time, never two at once on one GPU
    overlaps = [(a, b) for a in done for b in done if a is not b and a["start"] < b["end"] and b["start"] < a["end"]]
    assert overlaps and all(a["gpu"] != b["gpu"] for a, b in overlaps)
    # the ladder's verdicts are those of one GPU: the same stack kept
    assert _kept(result) == KEPT
    rec = {t["name"]: t for t in result["trials"]}
    assert all(rec[n].get("gpu") in ("0", "1", "2") for n in rec if n.startswith("0") and rec[n].get("status") != "not run")
    summary = result["gpus"]
    assert [g["gpu"] for g in summary["gpus"]] == ["0", "1", "2"]
    assert any(p["started_on_a_guess"] for p in summary["processes"])   # a guess ran ahead and was taken
    # each process says when it ran, from the trials' start: two taken ran at the same time
    spans = [(p["from_s"], p["to_s"]) for p in summary["processes"]]
    assert all(0 <= a <= b for a, b in spans)
    assert any(a[0] < b[1] and b[0] < a[1] for i, a in enumerate(spans) for b in spans[i + 1:])


def test_the_batch_sizes_and_the_data_free_ceiling_run_side_by_side(tmp_path):
    """After the ladder, the batch sizes measured apart and the data-free ceiling depend on the
    final stack alone: the ceiling is guessed with them and runs beside one of them, on another
    GPU."""
    runner = WithCeiling({**SPEEDS, "batch-size": 10.0, "cached-batch": 25.0}, hold=0.4)
    ctx = TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                       baseline={**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8}}}},
                       baseline_findings=[*FINDINGS, {"code": "ADV000", "estimated_gain_ms": 5.0,
                                                      "fix": {"intervention": "batch-size"}}],
                       environment={}, progress=lambda s: None, runner=runner, gpus=["0", "1", "2"])
    result = trials.run_trials(ctx)
    done = {r["name"]: r for r in runner.runs if not r.get("stopped")}
    ceiling = done["ceiling-data-free"]
    beside = [done[n] for n in ("apart-batch-size-x2", "apart-batch-size-x4")
              if done[n]["start"] < ceiling["end"] and ceiling["start"] < done[n]["end"]]
    assert beside and all(r["gpu"] != ceiling["gpu"] for r in beside)
    assert result["ceiling"]["status"] == "bound"


def test_once_the_stack_is_final_a_gpu_is_given_up_for_the_patch_beside_the_last_trials(tmp_path):
    """advisor.pipeline verifies the patch beside the measurements on top of the final stack:
    the ladder calls on_final_stack once, with its final stack, before those measurements;
    the GPU claimed then runs none of the ladder's processes until it is released."""
    seen = []

    def on_final_stack(result, runner):
        # no rung is to come: only the measurements on top of the stack still run on a guess
        guessing = [j.name for j in runner.jobs.values() if j.guess and j.result is None]
        seen.append({"stack": [s["name"] for s in result["stack"]], "gpu": runner.claim(), "when": time.monotonic(),
                     "guessing": guessing})

    runner_of = WithCeiling({**SPEEDS, "batch-size": 10.0, "cached-batch": 25.0}, hold=0.3)
    ctx = TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                       baseline={**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8}}}},
                       baseline_findings=[*FINDINGS, {"code": "ADV000", "estimated_gain_ms": 5.0,
                                                      "fix": {"intervention": "batch-size"}}],
                       environment={}, progress=lambda s: None, runner=runner_of, gpus=["0", "1", "2", "3"])
    result = trials.run_trials(ctx, on_final_stack)
    assert len(seen) == 1 and set(seen[0]["stack"]) == KEPT
    assert all(n.startswith(("apart-", "ceiling-")) for n in seen[0]["guessing"]), seen[0]["guessing"]
    claimed = seen[0]["gpu"]
    assert claimed in ("0", "1", "2", "3")
    assert not [r for r in runner_of.runs if r["start"] >= seen[0]["when"] and r["gpu"] == claimed]
    assert {"apart-batch-size-x2", "ceiling-data-free"} <= {t["name"] for t in result["trials"]}
    assert _kept(result) == KEPT
    # one GPU only: no stack is handed over (the verification runs after the trials, as ever)
    seen.clear()
    ctx = TrialContext(script="train.py", script_args=[], run_dir=tmp_path / "one", opts=specs.AnalyzeOptions(),
                       baseline=_timed(100.0), baseline_findings=FINDINGS, environment={},
                       progress=lambda s: None, runner=FakeGpus(SPEEDS, hold=0.0))
    trials.run_trials(ctx, on_final_stack)
    assert seen == []
    # a GPU is given up only while another is left to the ladder, and only one no process holds
    two = gpus.ParallelRunner(None, ["0", "1"])
    assert two.claim() == "0" and two.claim() is None
    two.release("0")
    assert two.claim() == "0"


def test_work_beside_the_trials_gets_ctrl_c_and_raises_where_it_is_joined():
    from advisor.beside import Beside

    released, stopped = [], []
    beside = Beside()

    def work():   # a child process stopped through its signals, as run_child is
        while not beside.signals.count:
            time.sleep(0.01)
        stopped.append(True)

    beside.start(work, release=lambda: released.append(True))
    t0 = time.monotonic()
    beside.join(lambda: time.monotonic() - t0 > 0.3)
    assert stopped and released and beside.signals.count == 1

    failing = Beside()
    failing.start(lambda: 1 / 0, release=lambda: released.append(True))
    with pytest.raises(ZeroDivisionError):
        failing.join(lambda: False)
    assert len(released) == 2


def test_a_gpu_slower_beyond_the_noise_has_its_runs_scaled_to_the_first(tmp_path):
    """GPU 2 runs everything 25% slower: its offset is measured from the baseline run on it and
    divided out, so the channels-last trial, wherever it ran, reads 39.9 ms on top of 59.9."""
    runner = FakeGpus(SPEEDS, slow={"2": 1.25})
    result = _ladder(tmp_path, runner, ["0", "1", "2"], FINDINGS)
    offsets = {g["gpu"]: g for g in result["gpus"]["gpus"]}
    assert offsets["2"]["offset"] == pytest.approx(1.25) and offsets["2"]["applied"] is True
    assert offsets["1"]["offset"] == pytest.approx(1.0) and offsets["1"]["applied"] is False
    # two GPUs: the guess the ladder takes ran on the slow one
    runner = FakeGpus(SPEEDS, slow={"2": 1.25})
    result = _ladder(tmp_path / "two", runner, ["0", "2"], FINDINGS)
    on_two = [t for t in result["trials"] if t.get("gpu") == "2"]
    assert on_two and all(t["gpu_offset"] == pytest.approx(1.25) for t in on_two)
    assert _kept(result) == KEPT
    times = {t["name"]: t["step_time_ms"] for t in result["trials"] if t.get("step_time_ms")}
    assert times["02-channels-last"] == pytest.approx(39.9)


def test_one_gpu_runs_the_ladder_as_before(tmp_path):
    runner = FakeGpus(SPEEDS, hold=0.0)
    result = _ladder(tmp_path, runner, ["0"], FINDINGS)
    assert "gpus" not in result and all(r["gpu"] is None for r in runner.runs)
    assert _kept(result) == KEPT


def test_one_process_a_name_at_a_time_and_the_runs_not_taken_leave_nothing(tmp_path):
    """Both branches' next rung share a name (and a directory): never side by side; a run the
    ladder did not take is removed, the calibration runs too."""
    runner = FakeGpus(SPEEDS)
    _ladder(tmp_path, runner, ["0", "1", "2", "3"], FINDINGS)
    by_name: dict = {}
    for r in runner.runs:
        by_name.setdefault(r["name"], []).append(r)
    for runs in by_name.values():
        assert not any(a is not b and a["start"] < b["end"] and b["start"] < a["end"] for a in runs for b in runs)
    left = {p.name for p in (tmp_path / "trials").iterdir() if p.is_dir() and not p.name.startswith(".")}
    taken = {t for t in left if not t.startswith("00-baseline-gpu")}
    assert left == taken and "02-channels-last-reference" not in left


def test_ctrl_c_stops_every_process_running_side_by_side(tmp_path):
    runner = FakeGpus(SPEEDS, hold=30.0)
    t0 = time.monotonic()
    ctx = TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                       baseline=_timed(100.0), baseline_findings=FINDINGS, environment={},
                       progress=lambda s: None, runner=runner, gpus=["0", "1", "2"],
                       interrupted=lambda: time.monotonic() - t0 > 0.5)
    result = trials.run_trials(ctx)
    assert result["interrupted"] and time.monotonic() - t0 < 10
    assert runner.runs and all(r.get("stopped") for r in runner.runs)


def test_the_trials_say_how_long_they_should_take(tmp_path):
    """A process each for the repeat, the fixes the findings ask for and the ceiling, each as
    long as the baseline's process, within the budget."""
    said: list[str] = []
    ctx = TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                       baseline={**_timed(100.0), "elapsed_s": 40.0}, baseline_findings=FINDINGS, environment={},
                       progress=said.append, runner=FakeGpus(SPEEDS, hold=0.0), budget_s=900.0)
    result = trials.run_trials(ctx)
    assert result["expected_s"] == 5 * 40.0
    assert "trials: about 3 min: 5 processes of about 40 s (the repeat, 3 fixes, the data-free ceiling), " \
           "compiles on top" in said
    ctx = TrialContext(script="train.py", script_args=[], run_dir=tmp_path / "b", opts=specs.AnalyzeOptions(),
                       baseline={**_timed(100.0), "elapsed_s": 40.0}, baseline_findings=FINDINGS, environment={},
                       progress=said.append, runner=FakeGpus(SPEEDS, hold=0.0), budget_s=60.0)
    assert trials.run_trials(ctx)["expected_s"] == 60.0
    assert any(line.startswith("trials: about 60 s (the budget)") for line in said)


def test_real_trial_processes_side_by_side(tmp_path):
    """The real runner (child processes, traces, the rules) under ParallelRunner: two processes at
    once on this host's two cores, each told its 'GPU' in its spec (on the CPU the variable
    changes nothing); every trial completes with its GPU recorded, and the calibration run and the
    guesses not taken leave no directory."""
    from pathlib import Path

    from advisor.runner.parent import run_child

    # a step the model sets, not the loader: the other GPU is calibrated beside the repeat
    script = str(Path(__file__).parent / "fixtures" / "scripts" / "slow_recipe.py")
    opts = specs.AnalyzeOptions(warmup=2, measure_steps=6, profile_steps=1)
    base = run_child(specs.make_spec(script, ["--steps", "400"], tmp_path / "baseline", opts),
                     timeout=300, step_timeout=120)
    assert base["status"] == "complete", base.get("incomplete_reasons")
    assert (measure.data_wait_share(base) or 0.0) < gpus.LOADER_SET
    findings = [{"code": "ADV000", "estimated_gain_ms": g, "fix": {"intervention": f}}
                for f, g in (("fused-optimizer", 1.0), ("cudnn-benchmark", 0.5))]
    ctx = TrialContext(script=script, script_args=["--steps", "400"], run_dir=tmp_path, opts=opts, baseline=base,
                       baseline_findings=findings, environment={}, progress=lambda s: None, gpus=["0", "1"],
                       trial_timeout=300)
    result = trials.run_trials(ctx)
    ran = [t for t in result["trials"] if t.get("status") not in ("not run", "skipped")]
    assert ran and all(t.get("gpu") in ("0", "1") for t in ran), [(t["name"], t.get("gpu")) for t in ran]
    for t in ran:   # pinned before the script's first line; the repeat runs as the baseline did
        spec = json.loads((tmp_path / "trials" / t["name"] / "spec.json").read_text())
        pinned = spec.get("environ", {}).get("CUDA_VISIBLE_DEVICES")
        assert pinned == (None if t["name"] == "00-baseline-repeat" else t["gpu"]), (t["name"], pinned)
    left = sorted(p.name for p in (tmp_path / "trials").iterdir() if p.is_dir() and not p.name.startswith("."))
    taken = result["gpus"]["processes"]   # every process the ladder took (confirmation rounds too)
    assert left == sorted({p["process"] for p in taken}), left
    assert not any(name.startswith("00-baseline-gpu") for name in left)
    assert {p["gpu"] for p in taken} <= {"0", "1"}
    # GPU 1 ran a process of its own beside the repeat on GPU 0: the baseline, whose step time
    # gave its offset (whether the ladder then took a guess from GPU 1 depends on what the rules
    # find on this host's traces: the fake-GPU tests above pin that down)
    offsets = {g["gpu"]: g for g in result["gpus"]["gpus"]}
    assert list(offsets) == ["0", "1"]
    assert offsets["1"]["offset"] > 0 and "why" not in offsets["1"], offsets["1"]
    # a process on a GPU of its own starts from a spare (python and torch up), not cold
    assert all(t.get("started_warm") for t in ran if t["name"] != "00-baseline-repeat"), \
        [(t["name"], t.get("started_warm")) for t in ran]


def test_the_patch_is_verified_beside_the_trials_on_the_gpu_they_gave_up(tmp_path):
    """advisor.pipeline: with the final stack, fixes.patch is written and run as plain python in
    a thread, its runs told the GPU the ladder's runner gave up; the GPU goes back once done."""
    from advisor.beside import Beside
    from tests.test_verify_retime import analyzed_slow_recipe

    run, opts, doc, child = analyzed_slow_recipe(tmp_path)
    run_dir, script = tmp_path / "run", tmp_path / "slow_recipe.py"
    kept = {"name": "01-set-to-none", "fix": "set-to-none", "status": "accepted",
            "samples_per_s": child["batch_size"] * 1000.0 / (sum(child["step_times_ms"]) / len(child["step_times_ms"]))}
    result = {"stack": [{"name": "set-to-none", "params": {}}], "trials": [kept], "noise": 0.05, "threshold": 0.1}
    runner, beside = gpus.ParallelRunner(None, ["0", "1"]), Beside()
    run._verify_beside(beside, opts, doc, child, result, runner)
    assert beside.started and runner.held_out == {"0"}
    beside.join(lambda: False)
    assert runner.held_out == set()
    verification = doc["patch"]["verification"]
    assert verification["gpu"] == "0" and verification["runs"] >= 1, verification
    assert verification["checks"][0]["took_effect"] is True
    spec = json.loads((run_dir / "verify" / "run-1" / "spec.json").read_text())
    assert spec["environ"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert (run_dir / "fixes.patch").exists() and script.read_text().count("set_to_none=False") == 1


def test_no_gpu_is_calibrated_beside_the_repeat_when_the_loader_sets_the_step(tmp_path):
    """A baseline that waits for its batch a third of the time: the GPUs' offsets would not show
    in its step, and copies of its loader beside the repeat would load the host its noise is
    measured on; no baseline runs on the other GPUs, and the summary says why."""
    runner = FakeGpus(SPEEDS)
    base = {**_timed(100.0), "data_wait_ms": [35.0] * 10}
    ctx = TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                       baseline=base, baseline_findings=FINDINGS, environment={}, progress=lambda s: None,
                       runner=runner, gpus=["0", "1", "2"])
    result = trials.run_trials(ctx)
    assert not any(r["name"].startswith("00-baseline-gpu") for r in runner.runs)
    others = [g for g in result["gpus"]["gpus"] if g["gpu"] != "0"]
    assert others and all("the loader sets the step (35%" in g["why"] and not g["applied"] for g in others)
    assert _kept(result) == KEPT   # the trials still ran side by side
    assert {r["gpu"] for r in runner.runs if r["gpu"]} > {"0"}
    # the other GPUs are free during the repeat: the first trial is guessed there, and taken
    repeat = next(p for p in result["gpus"]["processes"] if p["process"] == "00-baseline-repeat")
    assert any(g["from_s"] < repeat["to_s"] for g in result["gpus"]["guesses"])
    assert result["gpus"]["processes"][1]["started_on_a_guess"]
    # ... and the rung after it, on the branch where the first is kept (three GPUs: none idles)
    assert any(g["process"].startswith("02-") and g["from_s"] < repeat["to_s"] for g in result["gpus"]["guesses"]), \
        result["gpus"]["guesses"]


def test_the_same_rung_on_both_branches_runs_twice_and_the_one_taken_gets_its_name(tmp_path):
    """While tf32 runs, channels_last comes next whatever its verdict: on the stack with tf32 and
    on the one without. Both start, the second under an alias (one process a directory); tf32
    is rejected, the ladder takes the alias's run, and its directory and what its run says of
    it move to the trial's name: no alias is left behind."""
    class Traced(FakeGpus):
        def process(self, ctx, name, stack, profile=True, guesses=None):
            child, analysis, model = super().process(ctx, name, stack, profile, guesses)
            if child.get("status") == "complete":
                (ctx.run_dir / "tb" / name).mkdir(parents=True, exist_ok=True)
                (ctx.run_dir / "tb" / name / "w.pt.trace.json.gz").write_text("{}")
                child = {**child, "run_name": name, "trace_files": [f"tb/{name}/w.pt.trace.json.gz"]}
            return child, analysis, model

    runner = Traced({"tf32": -1.0, "channels-last": -0.5, "cudnn-benchmark": 20.0}, hold=0.3)
    findings = [{"code": "ADV000", "estimated_gain_ms": g, "fix": {"intervention": f}}
                for f, g in (("tf32", 5.0), ("channels-last", 3.0), ("cudnn-benchmark", 25.0))]
    ctx = TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                       baseline=_timed(100.0), baseline_findings=findings, environment={"gpu_count": 1},
                       progress=lambda s: None, runner=runner, gpus=["0", "1", "2", "3"])
    result = trials.run_trials(ctx)
    taken = {p["process"]: p for p in result["gpus"]["processes"]}
    assert list(taken)[:3] == ["00-baseline-repeat", "01-tf32", "02-channels-last"]
    assert taken["02-channels-last"]["started_on_a_guess"]
    assert taken["02-channels-last"]["from_s"] < taken["01-tf32"]["to_s"]   # started while tf32 ran
    assert any(g["process"] == "02-channels-last~1" for g in result["gpus"]["guesses"])
    rec = next(t for t in result["trials"] if t["name"] == "02-channels-last")
    assert rec["status"] == "rejected" and rec["traces"] == ["tb/02-channels-last/w.pt.trace.json.gz"]
    assert (tmp_path / "tb" / "02-channels-last" / "w.pt.trace.json.gz").exists()
    left = {p.name for d in ("trials", "tb") for p in (tmp_path / d).iterdir() if not p.name.startswith(".")}
    assert not any("~" in n for n in left), left


def test_a_ctrl_c_after_the_patch_was_verified_beside_the_trials_does_not_call_it_unverified():
    from advisor.pipeline import interrupted_reason

    patched = {"patch": {"file": "fixes.patch"}}
    assert interrupted_reason(patched, "trials").endswith("fixes.patch holds the fixes kept before it, not verified")
    verified = {"patch": {"file": "fixes.patch", "verification": {"status": "verified"}}}
    assert interrupted_reason(verified, "trials").endswith("fixes.patch holds the fixes kept before it")
    skipped = {"patch": {"file": "fixes.patch", "verification": {"status": "skipped"}}}
    assert interrupted_reason(skipped, "trials").endswith(", not verified")
    assert "fixes.patch" not in interrupted_reason({}, "trials")


def test_the_budget_is_the_whole_analyzes_and_keeps_room_for_what_is_left(tmp_path):
    """--budget counts from the analyze's start (its baseline in it): no process starts that would
    not end inside it, as long as the processes so far took (their median; the baseline's
    before any) and a compile on top where it compiles, with the patch's verification still to
    come: after a process whose verdict may change the stack (a run of that stack, as long as
    the process at least), after the ceiling on one GPU and beside it on several. The default
    shrinks with the GPUs side by side."""
    assert [trials.default_budget_s(n) for n in (0, 1, 2, 3, 4, 8)] == [240.0, 240.0, 180.0, 180.0, 120.0, 120.0]

    def ctx(gpus, took=()):
        c = TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                         baseline={**_timed(100.0), "elapsed_s": 30.0}, baseline_findings=[], environment={},
                         budget_s=150.0, started=time.monotonic() - 100.0, gpus=gpus)
        c.pace.took.extend(took)
        return c

    assert ctx([]).out_of_budget()                       # 100 s + a trial and the verification, 30 s each
    assert ctx(["0", "1"]).out_of_budget()               # side by side too: a kept fix is verified after it
    assert not ctx(["0", "1"]).out_of_budget(changes_stack=False)   # the ceiling: the verification runs beside
    assert ctx([]).out_of_budget(changes_stack=False)    # ... and after it on one GPU
    assert not ctx([], took=[10.0, 12.0, 50.0]).out_of_budget()   # the processes so far took 12 s
    # planned to end by 95% of the budget (the estimates err, the report comes after): not at 146 s of 150
    assert ctx([], took=[23.0]).out_of_budget() and not ctx([], took=[21.0]).out_of_budget()
    assert ctx(["0", "1"], took=[55.0]).out_of_budget(changes_stack=False)
    # the patch's run as the kept stack's process took, its samples computed (not loaded)
    slow = ctx(["0", "1"], took=[10.0])
    slow.pace.verify_s = 60.0
    assert slow.out_of_budget(changes_stack=False) and not ctx(["0", "1"], took=[10.0]).out_of_budget()
    # a process that compiles: a guess on top before any compiled, then the most one compiled for
    quick = ctx([], took=[10.0])
    assert not quick.out_of_budget() and quick.out_of_budget(quick.pace.compile_guess())
    quick.pace.note({"started_warm": True, "compile_s": 0.5})   # a library's own compile: not the model's
    assert quick.pace.compile_guess() == 30.0
    quick.pace.note({"started_warm": True, "compile_s": 4.0}, compiled=True)
    quick.pace.note({"started_warm": True, "compile_s": 6.0}, compiled=True)
    assert quick.pace.compile_guess() == 6.0 and not quick.out_of_budget(quick.pace.compile_guess())
    # what a process of these fixes takes on top: a compile, a cold start (ddp's ranks start cold)
    quick.pace.note({"started_warm": False, "startup": {"spawned": 100.0, "install": 109.5}})
    quick.pace.note({"started_warm": True, "startup": {"spawned": 100.0, "install": 100.1}})   # from a spare
    assert quick.pace.cold_s == [9.5]
    assert quick.pace.extra_for(["torch-compile", "amp"]) == 6.0 and quick.pace.extra_for(["ddp"]) == 9.5
    assert quick.pace.extra_for(["channels-last"]) == 0.0
    # the verification starts cold: a kept process started from a spare is counted with a cold start
    assert quick.pace.verification_after({"elapsed_s": 20.0, "started_warm": True}) == 29.5
    assert quick.pace.verification_after({"elapsed_s": 20.0, "started_warm": False}) == 20.0
