"""Trials on the CPU: a real input-bound script gets a measured, accepted num_workers fix and a
patch that applies; a harmful fix (NaN loss) is rejected by the numerics guard."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from advisor import measure

REPO = Path(__file__).resolve().parent.parent
SLOW = REPO / "examples" / "slow_loader.py"
TINY = REPO / "tests" / "fixtures" / "scripts" / "tiny_train.py"
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))


def advisor(*args, cwd, timeout=600):
    return subprocess.run([sys.executable, "-m", "advisor", *map(str, args)], cwd=cwd, env=ENV,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def slow_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trials")
    shutil.copy(SLOW, tmp / "slow_loader.py")  # the user's file: must come out untouched
    before = (tmp / "slow_loader.py").read_bytes()
    r = advisor("analyze", "--out", tmp / "run", "--warmup", "2", "--steps", "8", "--min-time", "0",
                "--profile-steps", "1", "slow_loader.py", "--sleep-ms", "4", cwd=tmp)
    assert (tmp / "slow_loader.py").read_bytes() == before
    return r, tmp


def test_input_bound_script_gets_an_accepted_worker_fix(slow_run):
    r, tmp = slow_run
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp / "run" / "run.json").read_text())
    assert any(f["code"] == "ADV103" for f in doc["findings"])
    summary = doc["trial_summary"]
    assert summary["threshold"] >= 0.03 and summary["noise"] is not None
    trials = {t["name"]: t for t in doc["trials"]}
    assert trials["00-baseline-repeat"]["status"] == "reference"
    accepted = [t for t in doc["trials"] if t["status"] == "accepted"]
    assert accepted and accepted[0]["fix"] == "dataloader-workers"
    best = accepted[-1]
    assert best["speedup_vs_baseline"] > 1.0 + summary["threshold"]
    assert best["steps_measured"] == 8 and best["traces"]
    assert (tmp / "run" / best["traces"][0]).is_file()  # every trial has its own trace in tb/
    assert summary["stack"][0]["name"] == "dataloader-workers"
    # every process after the baseline was started ahead, during the one before it (the
    # repeat once the baseline's timed window had closed), and the repeat only timed
    ran = [t for t in doc["trials"] if "started_warm" in t]
    assert ran and all(t["started_warm"] for t in ran), [(t["name"], t["started_warm"]) for t in ran]
    assert not trials["00-baseline-repeat"]["traces"] and trials["00-baseline-repeat"]["steps_measured"] == 8
    assert summary["lookahead"]["count"] == 0  # no CUDA use before its first step: no guess can wait


def test_patch_applies_and_has_the_effect(slow_run):
    _, tmp = slow_run
    patch = tmp / "run" / "fixes.patch"
    assert patch.is_file()
    work = tmp / "user"
    work.mkdir()
    shutil.copy(SLOW, work / "slow_loader.py")
    subprocess.run(["git", "init", "-q"], cwd=work, check=True)
    subprocess.run(["git", "apply", str(patch)], cwd=work, check=True)
    text = (work / "slow_loader.py").read_text()
    doc = json.loads((tmp / "run" / "run.json").read_text())
    # the patch's fixes: the kept stack less what the run (40 steps at most) does not pay back
    kept = [f["name"] for f in doc["trial_summary"]["stack"] if f["name"] not in (doc["patch"].get("left_out") or {})]
    if "preload-dataset" in kept:  # the samples are collated once; batches are gathered in the main process
        assert "class _PreloadedOnDevice" in text and "DataLoader(_PreloadedOnDevice(" in text and "num_workers=0" in text
    else:
        # the count where the script keeps it: the call's argument, or the flag that sets it,
        # given on the recommended command where the run read the script's parser (the
        # run-time chain, advisor.patch.provenance), with the matching persistent_workers (kept:
        # on a CPU nothing is pinned, and only a pinning loader leaves them out)
        command = doc["patch"]["command"]
        on_command = "--workers" in command and int(command[command.index("--workers") + 1]) > 0
        assert re.search(r"num_workers=[1-9]", text) and "persistent_workers=True" in text or \
            (on_command or re.search(r'"--workers", type=int, default=[1-9]', text)) \
            and "persistent_workers=args.workers > 0" in text, (command, text)

    # the recommended command's arguments (patch.command: a flag the patch sets there), shorter
    args = [*doc["patch"]["command"][2:], "--steps", "24"]

    def loaders(script_dir, argv=("--sleep-ms", "4", "--steps", "24")) -> list[list]:
        """[num_workers, dataset class] of each DataLoader the script makes, run as plain python
        (the speed this buys is benchmarks/slow_loader_workers.py's figure, not a test's)."""
        probe = ("import runpy, sys, torch.utils.data as d\nseen, orig = [], d.DataLoader.__init__\n"
                 "def init(self, *a, **k):\n    orig(self, *a, **k)\n    seen.append([self.num_workers, type(self.dataset).__name__])\n"
                 f"d.DataLoader.__init__ = init\nsys.argv = ['slow_loader.py', *{list(argv)!r}]\n"
                 "runpy.run_path('slow_loader.py', run_name='__main__')\nimport json\nprint('WORKERS', json.dumps(seen))")
        out = subprocess.run([sys.executable, "-c", probe], cwd=script_dir, capture_output=True, text=True,
                             timeout=300, check=True).stdout
        return json.loads(out.splitlines()[-1].split(" ", 1)[1])

    before, after = loaders(tmp), loaders(work, args)
    assert before == [[0, "SlowDataset"]]
    if "preload-dataset" in kept:    # its samples collated once, gathered in the main process
        assert after == [[0, "_PreloadedOnDevice"]]
    else:                            # the patched script loads in parallel workers
        assert after[0][0] > 0 and after[0][1] == "SlowDataset"


def test_harmful_trial_is_rejected_with_its_reason(tmp_path):
    r = advisor("analyze", "--out", tmp_path / "run", "--warmup", "2", "--steps", "6", "--profile-steps", "1",
                "--fix", "nan-loss", TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    nan = [t for t in doc["trials"] if t["fix"] == "nan-loss"]
    assert nan and nan[0]["status"] == "rejected"
    assert nan[0]["reason"].startswith("numerics: loss became nan")
    assert doc["trial_summary"]["stack"] == []
    assert not (tmp_path / "run" / "fixes.patch").exists()


def test_numerics_verdicts():
    base = [2.3, 2.2, 2.1, 2.0, 1.9, 1.8, 1.7, 1.6]
    assert measure.numerics_verdict(base, base, False) is None
    assert measure.numerics_verdict([2.3, float("inf")], base, False).startswith("loss became inf")
    assert measure.numerics_verdict([x * 1.2 for x in base], base, False)  # 20% worse: a safe fix may not
    assert measure.numerics_verdict([x * 1.2 for x in base], base, True) is None  # AMP may
    diverge = [1.0, 1.0, 1.1, 1.5, 2.0, 3.0, 4.0, 5.0]
    assert measure.numerics_verdict(diverge, [1.0] * 8, True).startswith("mean loss")  # off the baseline
    assert "diverged" in measure.numerics_verdict(diverge, [1.0, 1.0], True)  # too few to compare: the trend


def test_noise_threshold():
    a = {"step_times_ms": [10.0] * 20, "batch_size": 8}
    b = {"step_times_ms": [11.0] * 20, "batch_size": 8}
    noise = measure.pooled_noise([[a, b]])
    assert abs(noise - 0.1) < 1e-9
    assert measure.acceptance_threshold(noise) == pytest.approx(0.2)
    assert measure.acceptance_threshold(0.001) == 0.03
    assert measure.throughput_gain({"step_times_ms": [5.0], "batch_size": 8}, a) == pytest.approx(1.0)
    # more runs on each side: the comparison's noise shrinks by sqrt((1/nR + 1/nT) / 2)
    assert measure.acceptance_threshold(0.1, 2, 2) == pytest.approx(0.2 / 2 ** 0.5)
    assert measure.acceptance_threshold(0.1, 3, 3) == pytest.approx(0.2 / 3 ** 0.5)


def _timed(ms_per_step: float, steps: int = 10, batch: int = 8) -> dict:
    """A child result timed the way the runner times it: host-side steps and the window."""
    return {"status": "complete", "batch_size": batch, "step_times_ms": [ms_per_step] * steps,
            "measure_window_ms": ms_per_step * steps, "losses": [2.0, 1.9, 1.8, 1.7]}


def test_throughput_comes_from_the_synchronized_window():
    # Host-side step boundaries can be short while the GPU still works; the window's closing
    # sync charges that work to the run, so the window decides.
    child = {"batch_size": 4, "step_times_ms": [1.0, 1.0, 1.0, 37.0], "measure_window_ms": 40.0}
    assert measure.step_ms(child) == pytest.approx(10.0)
    assert measure.median_step_ms(child) == pytest.approx(1.0)
    assert measure.samples_per_s(child) == pytest.approx(400.0)
    old = {"batch_size": 4, "step_times_ms": [9.0, 10.0, 11.0]}  # an older run.json: per-step syncs
    assert measure.step_ms(old) == pytest.approx(10.0)


def test_pooled_noise_and_gain():
    assert measure.pooled_noise([[_timed(10.0), _timed(11.0)]]) == pytest.approx(0.1)
    assert measure.pooled_noise([[_timed(10.0)]]) is None
    # two configurations, each timed twice with a 10% spread: still 10%
    groups = [[_timed(10.0), _timed(11.0)], [_timed(20.0), _timed(22.0)]]
    assert measure.pooled_noise(groups) == pytest.approx(0.1)
    # geometric means: refs 10 and 11 ms, trials 5 and 5.5 ms -> exactly twice the rate
    assert measure.pooled_gain([_timed(5.0), _timed(5.5)], [_timed(10.0), _timed(11.0)]) == pytest.approx(1.0)


def test_warmup_cost_is_what_the_untimed_steps_took_beyond_the_steady_step():
    child = {**_timed(10.0), "warmup_step_times_ms": [9000.0, 2010.0, 10.0, 500.0]}
    assert measure.warmup_cost_s(child) == pytest.approx((2000.0 + 0.0 + 490.0) / 1e3)  # not the first
    assert measure.warmup_cost_s(_timed(10.0)) is None


def test_noise_comes_from_configurations_that_run_like_the_reference():
    from advisor.trials.verdicts import regime_noise as _regime_noise

    loader_bound = [_timed(100.0), _timed(130.0)]   # 30% apart: a busy host's loader
    gpu_bound = [_timed(10.0), _timed(10.1)]        # 1% apart
    assert _regime_noise([loader_bound, gpu_bound], gpu_bound) == pytest.approx(0.01)
    assert _regime_noise([loader_bound, gpu_bound], loader_bound) == pytest.approx(0.3)
    assert _regime_noise([loader_bound], [_timed(10.0)]) is None  # nothing alike: the caller pools all


def test_verdicts_confirm_gains_inside_the_noise():
    from advisor.trials.verdicts import judge as _verdict

    ref = [_timed(10.0), _timed(11.0)]
    loss_ref = _timed(10.0)
    status, reason, gain, used = _verdict([_timed(5.0)], ref, loss_ref, 0.10, False)
    assert status == "accepted" and gain > used
    status, reason, gain, used = _verdict([_timed(9.0)], ref, loss_ref, 0.10, False)
    assert status == "unsure" and 0.03 <= gain < used and "1 run vs 2 of the reference" in reason
    # the same gain on three runs a side clears the smaller threshold of the comparison
    status, *_ = _verdict([_timed(9.0)] * 3, [*ref, _timed(10.5)], loss_ref, 0.10, False)
    assert status == "accepted"
    status, reason, *_ = _verdict([_timed(10.4)], ref, loss_ref, 0.10, False)
    assert status == "rejected" and "under the" in reason and "1 run vs 2 of the reference" in reason
    nan = dict(_timed(5.0), losses=[2.0, float("nan")])
    status, reason, *_ = _verdict([_timed(5.0), nan], ref, loss_ref, 0.10, False)
    assert status == "rejected" and reason.startswith("numerics: loss became nan")


def test_a_batch_that_reads_differently_without_a_batch_fix_is_a_detection_fault():
    """The preloaded loader's 7x faster step read batch 1 (a transform's input) and was
    rejected as -99.6%: without a fix that changes the batch it is judged at the baseline's."""
    from advisor.trials.verdicts import judge

    base = {**_timed(52.8, batch=2048), "step_counts": [[1, 1, 1]] * 3}
    trial = {**_timed(7.0, batch=1), "batch_size_source": "model-input", "step_counts": [[1, 1, 1]] * 3}
    fault = measure.hold_batch(trial, base, batch_changes=False)
    assert "batch detected as 1 (model-input), not the baseline's 2048" in fault and "detection fault" in fault
    assert trial["batch_size"] == 2048 and trial["detected_batch"]["batch_size"] == 1
    assert measure.samples_per_s(trial) == pytest.approx(2048 * 1000 / 7.0)
    status, reason, gain, _ = judge([trial], [base], base, 0.05, False)
    assert status == "accepted" and gain == pytest.approx(52.8 / 7.0 - 1) and "detection fault" in reason
    assert measure.trial_figures(trial, None, base)["batch_fault"] == fault
    # a batch-size fix: the new batch stands
    bigger = _timed(90.0, batch=4096)
    assert measure.hold_batch(bigger, base, batch_changes=True) is None and bigger["batch_size"] == 4096
    # micro-batches count too: accumulation read as 1 where the baseline had 4
    acc_base = {**_timed(40.0, batch=8), "step_counts": [[0, 4, 4]] * 3}
    compiled = {**_timed(20.0, batch=8), "step_counts": [[0, 4, 0]] * 3}   # compiled: forwards hidden
    assert measure.hold_batch(compiled, acc_base, False) and measure.micro_batches(compiled) == 4
    # a compiled model that hid its batch takes the baseline's without a fault
    hidden = _timed(20.0, batch=None)
    assert measure.hold_batch(hidden, base, False) is None and hidden["batch_size"] == 2048
    same = _timed(40.0, batch=2048)
    assert measure.hold_batch(same, base, False) is None and "detected_batch" not in same


def test_tensorboard_lists_every_trial_of_a_run(slow_run, query_tb_profiler):
    _, tmp = slow_run
    doc = json.loads((tmp / "run" / "run.json").read_text())
    names = ["baseline"] + [t["name"] for t in doc["trials"] if t.get("traces")]
    # how many trials the ladder reaches moves with the host's noise (one on a loaded 2-core
    # host, where it stops early); each that has a trace is listed beside the baseline's
    assert len(names) >= 2
    info = query_tb_profiler(tmp / "run" / "tb", runs=names)
    assert set(names) <= set(info["runs"])
    assert info["overview"]["baseline"]


def test_competing_values_compare_by_ratio():
    from advisor.trials.verdicts import relative as _relative

    # +299% and +318% over one reference: the first ran 4.5% slower than the second
    assert _relative({"gain_vs_previous": 2.99}, {"gain_vs_previous": 3.18}) == pytest.approx(3.99 / 4.18 - 1)


def test_apply_runs_the_baseline_and_every_trial_with_the_fixes(tmp_path):
    r = advisor("analyze", "--out", tmp_path / "run", "--warmup", "2", "--steps", "6", "--profile-steps", "1",
                "--apply", "set-to-none", "--fix", "nan-loss,set-to-none", TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["applied"] == ["zero_grad(set_to_none=True)"]
    assert 'id="applied"' in (tmp_path / "run" / "index.html").read_text()  # the report says so
    assert "applied (--apply)" in r.stderr
    # (a busy host may time the reference again first: advisor.trials.sanity)
    trialled = [t for t in doc["trials"] if t["fix"] != "baseline (repeat)"]
    assert [t["fix"] for t in trialled] == ["nan-loss"]  # set-to-none is applied, not trialled
    for name in ("00-baseline-repeat", trialled[0]["name"]):
        spec = json.loads((tmp_path / "run" / "trials" / name / "spec.json").read_text())
        assert spec["interventions"][0] == {"name": "set-to-none", "params": {}}


def test_apply_syntax():
    from advisor.fixes import parse_specs

    assert parse_specs("amp:dtype=float16,channels-last,dataloader-workers:num_workers=8:pin_memory=true") == [
        {"name": "amp", "params": {"dtype": "float16"}}, {"name": "channels-last", "params": {}},
        {"name": "dataloader-workers", "params": {"num_workers": 8, "pin_memory": True}}]
    with pytest.raises(ValueError, match="no fix named 'warp'"):
        parse_specs("warp")
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_specs("amp:bf16")


def test_trials_get_ready_only_after_the_baselines_timed_window(tmp_path):
    """The repeat's process and the parent's imports start once the baseline's window has
    closed (its profile comes after it), never during the steps it times."""
    from advisor.trials.prep import TrialsPrep

    prep = TrialsPrep(str(tmp_path), False)
    for stage in ("started", "warmup", "measuring", "measure"):
        prep.on_stage(stage)
        assert not prep.started and prep.warm is None
    prep.on_stage("profiler-started")
    warm = prep.take_warm()
    assert prep.started and warm is not None and warm.proc.poll() is None
    prep.on_stage("done")  # once only
    assert prep.take_warm() is None
    warm.close()
    assert warm.proc.poll() is not None


CUDA_FIRST = '''
import sys, time, torch

class Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 4096
    def __getitem__(self, i):
        time.sleep(0.004)                    # I/O: more workers pay even on 2 cores
        return torch.full((16,), float(i % 7)), i % 3

time.sleep(0.5)                              # the script's own start-up (data, say)
try:
    torch.cuda.init()                        # first CUDA use: a guessed process waits here
except Exception:
    pass                                     # a CPU-only torch: the script trains on the CPU
loader = torch.utils.data.DataLoader(Slow(), batch_size=8, shuffle=True)
model = torch.nn.Linear(16, 3)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for epoch in range(100):
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
'''


def test_the_next_trial_starts_ahead_on_a_guess_and_waits_at_its_first_cuda_use(tmp_path):
    """advisor.trials.lookahead: while the repeat runs, a process is started on the first trial's
    spec (and the repeat's own while the baseline runs); it runs the script up to its first
    CUDA use and waits there, then becomes that trial (its name, its directory, its trace),
    measured like any other. On the GPU host the start-up it does ahead is most of a trial's
    wall time."""
    (tmp_path / "train.py").write_text(CUDA_FIRST)
    r = advisor("analyze", "--out", tmp_path / "run", "--warmup", "2", "--steps", "8", "--min-time", "0",
                "--profile-steps", "1", "--fix", "dataloader-workers", "--lookahead", "1", "train.py", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["trial_summary"]["lookahead"]["count"] == 1
    # (a busy host may time the reference again first, 00-baseline-repeat-2: never started ahead)
    ran = [t for t in doc["trials"] if t.get("elapsed_s") and not t["name"].startswith("00-baseline-repeat-")]
    held = [t["name"] for t in ran if t.get("started_held")]
    # the repeat started with the baseline (its spec is known then); the trial with the repeat
    assert held[:2] == ["00-baseline-repeat", "01-dataloader-workers-2"], [(t["name"], t.get("started_held")) for t in ran]
    assert doc["trial_summary"]["lookahead"]["used"] >= 2
    # the log says what was guessed while each process ran (the repeat's guess came before)
    log = doc["trial_summary"]["lookahead"]["log"]
    assert log[0] == {"process": "00-baseline-repeat", "guesses": ["01-dataloader-workers-2"], "warm_up": []}, log
    first = ran[1]
    assert first["status"] == "accepted" and first["steps_measured"] == 8
    at = first["startup_s"]  # seconds from the trial's go: the script had started before it
    assert at["script"] < 0 and at["script"] < at["held"] <= at["released"] <= at["first_step"], at
    assert first["traces"] and (tmp_path / "run" / first["traces"][0]).is_file()
    # no guess left behind: each directory is a trial's, or its re-run's on a noisy host
    # (confirmation rounds: NAME-confirm1, NAME-confirm1-reference)
    left = sorted(p.name for p in (tmp_path / "run" / "trials").iterdir())
    names = [t["name"] for t in ran]
    assert set(names) <= set(left) and all(any(d.startswith(n + "-") for n in names) for d in set(left) - set(names)), left
    assert not list((tmp_path / "run" / "trials").glob(".ahead*"))


def test_a_script_that_never_uses_cuda_gets_no_guesses(tmp_path):
    """The repeat starts with the baseline on a guess that it will wait at the first CUDA use;
    a script that trains on the CPU never gets there: the guess is dropped once it is seen
    training (at the latest when the baseline's window opens), nothing else is guessed, and
    the ladder runs as without lookahead."""
    r = advisor("analyze", "--out", tmp_path / "run", "--warmup", "2", "--steps", "6", "--profile-steps", "1",
                "--lookahead", "1", "--fix", "set-to-none", TINY, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["trial_summary"]["lookahead"]["count"] == 0
    ran = [t for t in doc["trials"] if t.get("elapsed_s")]
    assert ran and not any(t.get("started_held") for t in ran)
    assert doc["trials"][0]["status"] == "reference" and doc["trials"][0]["steps_measured"] >= 6
    assert not list((tmp_path / "run" / "trials").glob(".ahead*"))


def test_a_guess_made_again_goes_on_and_the_others_are_dropped(tmp_path):
    """advisor.trials.lookahead.Lookahead.guess: a guess whose spec is guessed again for the next
    process keeps running (not killed and started over: on a GPU host it may be compiling);
    one not guessed again is dropped with its directory. The log says which guesses went on
    and which had ended before their turn."""
    from advisor.specs import AnalyzeOptions, trial_spec
    from advisor.trials.lookahead import Lookahead

    (tmp_path / "train.py").write_text(CUDA_FIRST)
    opts = AnalyzeOptions(warmup=2, profile_steps=1, measure_steps=4)

    def spec(name, fixes):
        return trial_spec(str(tmp_path / "train.py"), [], tmp_path / "run", opts, name,
                          [{"name": f, "params": {}} for f in fixes])

    ahead = Lookahead(tmp_path / "run", 2, str(tmp_path), False)
    try:
        ahead.guess(spec("01-a", []), [spec("02-b", ["set-to-none"])])
        first = ahead.guesses[0]
        ahead.guess(spec("02-b", ["set-to-none"]), [spec("03-c", ["tf32"]), spec("02-b-again", ["set-to-none"])])
        assert ahead.guesses[1] is first and first.alive()  # the same process, guessed again
        assert ahead.made == 2
        assert ahead.log[-1]["on_its_way"] == ["02-b-again"] and "lost" not in ahead.log[-1]
        third = ahead.guesses[0]
        third.proc.kill()
        third.proc.wait()
        ahead.guess(spec("03-c", ["tf32"]), [spec("04-d", ["cudnn-benchmark"])])
        assert first.proc.poll() is not None  # not guessed again: dropped (and 03-c, never taken)
        # the log says which guess had ended before its turn (a trial then starts fresh)
        assert ahead.log[-1]["lost"] == ["03-c"] and "on_its_way" not in ahead.log[-1]
        assert sorted(p.name for p in (tmp_path / "run" / "trials").iterdir()) == [".ahead-3"]
    finally:
        ahead.close()
    assert not list((tmp_path / "run" / "trials").iterdir())
