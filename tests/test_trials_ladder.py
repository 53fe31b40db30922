"""The trials ladder with injected runs (no child processes): which processes it starts, when
a one-run reference is timed again (confirm on demand), and when a fallback is tried."""

from __future__ import annotations

import collections
import time

import pytest

from advisor import specs, trials
from advisor.trials.candidates import expand
from advisor.trials.verdicts import UNMEASURED_REGIME_GAIN, retime_reference

RO, DEFAULT = "torch-compile(mode=reduce-overhead)", "torch-compile(mode=default)"


def _timed(ms_per_step: float, steps: int = 10, batch: int = 8) -> dict:
    return {"status": "complete", "batch_size": batch, "step_times_ms": [ms_per_step] * steps,
            "measure_window_ms": ms_per_step * steps, "losses": [2.0, 1.9, 1.8, 1.7]}


def _finding(fix: str, gain: float) -> dict:
    return {"code": "ADV000", "estimated_gain_ms": gain, "fix": {"intervention": fix}}


def ladder(tmp_path, speeds: dict, findings: list[dict], environment: dict | None = None,
           baseline: dict | None = None, rules: list[dict] | None = None, idle: dict | None = None,
           only: set[str] | None = None, lookahead: int | None = None, with_ceiling: bool = False,
           interrupted=None, budget_s: float | None = None, clock: list | None = None):
    """Run the ladder; speeds maps a stack (tuple of candidate keys) to the ms/step of its
    successive runs (the last one repeats; a run may be a whole child result), or to a whole
    child result. interrupted: the context's Ctrl-C question. rules: what the rules
    find on every trial's trace (each trial then has one; idle: a stack's GPU idle share in
    it, default unknown); else trials leave none. Returns
    (result, calls: [(process name, stack keys, profiled)], progress lines). budget_s: the whole
    analyze's, on the fake clock ``clock`` ([now]; time.monotonic reads it) that every process
    moves on by its elapsed_s."""
    calls, lines, seen = [], [], {}

    def traced(keys, ms):
        if rules is None:
            return None, None
        share = (idle or {}).get(keys)
        analysis = {"stub": True} if share is None else \
            {"step_time_ms": ms, "breakdown": {"gpu_idle": share * ms}}
        return {**analysis, "keys": keys}, object()

    class Fake(trials.TrialRunner):
        def process(self, ctx, name, stack, profile=True, guesses=None):
            keys = tuple(c.key for c in stack)
            calls.append((name, keys, profile, [(n, tuple(c.key for c in s), p) for n, s, p in guesses or []]))
            got = speeds[keys]
            if clock is not None:
                clock[0] += 10.0   # every process takes 10 s (the baseline's elapsed_s, ladder_on_clock)
            if isinstance(got, dict):
                return (got, *traced(keys, None))
            i = seen.get(keys, 0)
            seen[keys] = i + 1
            ms = got[min(i, len(got) - 1)]
            if isinstance(ms, dict):
                return (ms, *traced(keys, None))
            return (_timed(ms), *traced(keys, ms))

        def findings(self, model, analysis, *a, **k):
            # rules: a list found on every trace; a callable of the trace's stack keys
            return rules(analysis["keys"]) if callable(rules) else rules

        def ceiling(self, after, name=None):   # the data-free ceiling's process after the ladder (its own test below)
            return super().ceiling(after, name) if with_ceiling else None

    baseline = baseline or _timed(100.0)
    if lookahead:  # guesses need a script that uses CUDA before its first step
        baseline = {**baseline, "startup": {"cuda_init": 1.0, "first_step": 2.0}}
    ctx = trials.TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                              baseline=baseline, baseline_findings=findings,
                              environment=environment or {}, progress=lines.append, only=only,
                              lookahead=lookahead, interrupted=interrupted, runner=Fake(),
                              # the baseline's stage took 20 s of the clock
                              **({"budget_s": budget_s, "started": clock[0] - 20.0} if clock is not None else {}))
    return trials.run_trials(ctx), calls, lines


def _rec(result, prefix: str) -> dict:
    return next(t for t in result["trials"] if t["name"].startswith(prefix))


def test_a_kept_fix_with_a_large_gain_is_not_timed_again(tmp_path):
    speeds = {(): [101.0], ("set-to-none",): [50.0], ("set-to-none", "channels-last"): [49.9]}
    result, calls, _ = ladder(tmp_path, speeds,
                              [_finding("set-to-none", 10.0), _finding("channels-last", 5.0)])
    # +100% against a 3% threshold: the kept stack is not re-run; the next trial is judged
    # against its one run, and its -0.2% is far from any threshold
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-set-to-none", "02-channels-last"]
    assert result["processes"] == 4
    kept, nxt = _rec(result, "01-"), _rec(result, "02-")
    assert kept["status"] == "accepted" and kept["reference_runs"] == 2
    assert nxt["status"] == "rejected" and nxt["reference_runs"] == 1 and nxt["runs"] == 1
    assert "1 run vs 1 of the reference" in nxt["reason"]  # the verdict says what it rests on
    assert result["stack"] == [{"name": "set-to-none", "params": {}}]


@pytest.mark.parametrize("kept_ms, trial_ms, again, why", [
    (60.0, 57.0, True, "+5.3%: accepted, under twice the 3% threshold"),
    (60.0, 59.0, True, "+1.7%: rejected, over half the threshold"),
    (60.0, 55.5, False, "+8.1%: over twice the threshold, in a regime with its own noise"),
    (60.0, 59.5, False, "+0.8%: under half the threshold"),
    (30.0, 27.75, True, "+8.1% but nothing within 2x of 30 ms was timed twice: under 9%"),
    (30.0, 27.0, False, "+11.1%: over 9% and twice the threshold"),
])
def test_a_one_run_reference_is_timed_again_only_when_the_verdict_could_turn_on_it(
        tmp_path, kept_ms, trial_ms, again, why):
    speeds = {(): [101.0], ("set-to-none",): [kept_ms, kept_ms * 1.005],
              ("set-to-none", "channels-last"): [trial_ms]}
    result, calls, lines = ladder(tmp_path, speeds,
                                  [_finding("set-to-none", 10.0), _finding("channels-last", 5.0)], lookahead=2)
    names = [c[0] for c in calls]
    assert "01-set-to-none-repeat" not in names  # never a repeat right after a kept fix
    nxt = _rec(result, "02-")
    if again:
        assert names == ["00-baseline-repeat", "01-set-to-none", "02-channels-last", "02-channels-last-reference"], why
        # timing-only, the kept stack alone; guessed while 02 ran
        assert calls[-1][:3] == ("02-channels-last-reference", ("set-to-none",), False)
        assert calls[-1][:3] in calls[-2][3]
        assert nxt["reference_runs"] == 2 and "1 run vs 2 of the reference" in nxt["reason"]
        assert any("the reference has one run" in line and "timing it again" in line for line in lines)
    else:
        assert names == ["00-baseline-repeat", "01-set-to-none", "02-channels-last"], why
        assert nxt["reference_runs"] == 1 and "1 run vs 1 of the reference" in nxt["reason"]
    expect = "accepted" if trial_ms <= 0.97 * kept_ms else "rejected"
    assert nxt["status"] == expect


def test_an_unsure_verdict_on_another_regimes_noise_is_settled_by_the_reference_alone(tmp_path):
    # The baseline pair spreads 25% (loader-bound); the kept stack runs 5x faster, where
    # nothing was timed twice: its +11% trial is "unsure" against a 50% threshold. Timing
    # the reference alone gives its regime a noise of its own (0.5%): accepted, no rounds.
    speeds = {(): [125.0], ("set-to-none",): [20.0, 20.1], ("set-to-none", "channels-last"): [18.0]}
    result, calls, lines = ladder(tmp_path, speeds,
                                  [_finding("set-to-none", 110.0), _finding("channels-last", 5.0)])
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-set-to-none", "02-channels-last",
                                     "02-channels-last-reference"]
    nxt = _rec(result, "02-")
    assert nxt["status"] == "accepted" and nxt["runs"] == 1 and nxt["reference_runs"] == 2
    assert nxt["noise_at_verdict"] == pytest.approx(0.005, abs=1e-3)
    assert any("no noise of its own regime" in line for line in lines)


def test_a_marginal_trial_against_a_two_run_reference_gets_confirmation_rounds(tmp_path):
    # the baseline has its pair (noise 10%, threshold 17.3% for 1 vs 2): +14% is unsure; the
    # reference and the trial are timed again alternately, as before, with no separate
    # reference re-run; pooled, +12.2% clears the 8.5% threshold of 2 runs vs 3
    speeds = {(): [110.0, 100.0], ("set-to-none",): [92.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 15.0)], lookahead=2)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-set-to-none", "01-set-to-none-confirm1-reference",
                                     "01-set-to-none-confirm1"]
    rec = _rec(result, "01-")
    assert rec["status"] == "accepted" and rec["runs"] == 2 and rec["reference_runs"] == 3
    assert "2 runs vs 3 of the reference" in rec["reason"]
    # each run of the round was guessed (timing only) while the one before it ran
    assert calls[3][:3] == ("01-set-to-none-confirm1", ("set-to-none",), False) and calls[3][:3] in calls[2][3]
    assert ("01-set-to-none-confirm2-reference", (), False) in calls[3][3]


def test_retime_reference_band():
    t = 0.03
    assert retime_reference("accepted", 0.059, t, True) and not retime_reference("accepted", 0.06, t, True)
    assert retime_reference("rejected", 0.015, t, True) and not retime_reference("rejected", 0.0149, t, True)
    assert retime_reference("unsure", 0.04, 0.2, True)  # marginal by definition
    # no noise measured in the reference's regime: at least up to 9%
    assert UNMEASURED_REGIME_GAIN == pytest.approx(0.09)
    assert retime_reference("accepted", 0.089, t, False) and not retime_reference("accepted", 0.09, t, False)
    assert retime_reference("accepted", 0.8, 0.445, False) and not retime_reference("accepted", 0.89, 0.445, False)
    for status in ("failed", "skipped"):
        assert not retime_reference(status, None, None, True)
    assert not retime_reference("rejected", None, None, False)  # numerics: speed plays no part


def test_compile_default_is_the_fallback_of_reduce_overhead_on_a_gpu():
    gpu = expand({"intervention": "torch-compile"}, "ADV109", 1.0, {"gpu_count": 1})
    assert [c.key for c in gpu] == [RO] and gpu[0].fallback.key == DEFAULT
    assert set(gpu[0].fallback_when) == {"skipped", "failed", "rejected"}
    assert [c.key for c in expand({"intervention": "torch-compile"}, None, None, {})] == [DEFAULT]
    preload = expand({"intervention": "preload-dataset"}, "ADV118", 1.0, {"gpu_count": 1})[0]
    assert preload.fallback.key == "precompute-samples" and set(preload.fallback_when) == {"skipped", "failed"}


def test_default_compile_is_not_trialled_after_reduce_overhead_was_accepted(tmp_path):
    speeds = {(): [101.0], (RO,): [50.0], (DEFAULT,): [60.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("torch-compile", 10.0)], {"gpu_count": 1})
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-torch-compile-reduce-overhead"]
    assert not any(DEFAULT in c[1] for c in calls)
    assert result["stack"] == [{"name": "torch-compile", "params": {"mode": "reduce-overhead"}}]


@pytest.mark.parametrize("ro", [[110.0], {"status": "failed", "incomplete_reasons": ["exit code 1"]}],
                         ids=["rejected", "crashed"])
def test_default_compile_is_trialled_when_reduce_overhead_is_not_accepted(tmp_path, ro):
    speeds = {(): [101.0], (RO,): ro, (DEFAULT,): [60.0]}
    result, calls, lines = ladder(tmp_path, speeds, [_finding("torch-compile", 10.0)], {"gpu_count": 1})
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-torch-compile-reduce-overhead",
                                     "02-torch-compile-default"]
    assert _rec(result, "01-")["status"] == ("rejected" if isinstance(ro, list) else "failed")
    assert _rec(result, "02-")["status"] == "accepted"
    assert result["stack"] == [{"name": "torch-compile", "params": {"mode": "default"}}]
    assert any(f"trying {DEFAULT} instead" in line for line in lines)


@pytest.mark.parametrize("preload, fallback", [
    ({"status": "failed", "incomplete_reasons": ["CUDA out of memory"]}, True),
    ([110.0], False),  # ran and was not faster: precompute removes only part of what it did
])
def test_precompute_is_the_fallback_of_a_preload_that_crashed_not_of_a_slow_one(tmp_path, preload, fallback):
    base = dict(_timed(100.0), config={"dataloader": {"value": {"batch_size": 8}}})
    speeds = {(): [101.0], ("preload-dataset",): preload, ("precompute-samples",): [70.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("preload-dataset", 10.0)], {"gpu_count": 1}, base)
    names = [c[0] for c in calls]
    assert names[:2] == ["00-baseline-repeat", "01-preload-dataset"]
    assert (names[2:] == ["02-precompute-samples"]) is fallback and len(names) == 2 + fallback


def test_a_fallback_for_a_refusal_or_a_crash_is_guessed_while_its_fix_runs(tmp_path):
    """preload-dataset falls back on precompute-samples when refused or crashed (not when
    rejected): that process is one of the guesses made while preload runs, and is taken."""
    base = {**_timed(100.0), "startup": {"cuda_init": 1.0, "first_step": 2.0},
            "config": {"dataloader": {"value": {"batch_size": 8}}}}
    speeds = {(): [101.0], ("preload-dataset",): {"status": "failed", "incomplete_reasons": ["CUDA out of memory"]},
              ("precompute-samples",): [70.0]}
    _, calls, _ = ladder(tmp_path, speeds, [_finding("preload-dataset", 10.0)], {"gpu_count": 1}, base, lookahead=3)
    assert [c[0] for c in calls][:3] == ["00-baseline-repeat", "01-preload-dataset", "02-precompute-samples"]
    assert ("02-precompute-samples", ("precompute-samples",), True) in calls[1][3]


def test_a_sample_that_differs_between_reads_skips_precompute_without_a_process(tmp_path):
    """preload-dataset refused at run time because a sample read twice differs: that is the
    dataset's, not the fix's. Its fallback, precompute-samples, refuses on the same check: it
    is recorded skipped, naming the trial that found it, and no process runs for it. A
    refusal of preload's own (device memory) still lets precompute run."""
    from advisor.runtime import NOT_APPLIED, SAMPLES_VARY

    base = dict(_timed(100.0), config={"dataloader": {"value": {"batch_size": 8}}})
    why = f"dataset[0] {SAMPLES_VARY}: preloading would freeze them"
    refused = {"status": "complete", "stage": "measured", "refused": True, "step_times_ms": [],
               "notes": [f"{NOT_APPLIED} preload-dataset: {why}"]}
    speeds = {(): [101.0], ("preload-dataset",): refused, ("precompute-samples",): [70.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("preload-dataset", 10.0)], {"gpu_count": 1}, base)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-preload-dataset"]
    assert _rec(result, "01-")["status"] == "skipped"
    pre = next(t for t in result["trials"] if t["fix"] == "precompute-samples")
    assert pre["status"] == "skipped" and pre["interventions"] == []
    assert pre["reason"] == f"dataset[0] {SAMPLES_VARY} (found by trial 01-preload-dataset)"

    own = {**refused, "notes": [f"{NOT_APPLIED} preload-dataset: the samples would take ~9.0 GiB (limit 2 GiB)"]}
    speeds[("preload-dataset",)] = own
    _, calls, _ = ladder(tmp_path, speeds, [_finding("preload-dataset", 10.0)], {"gpu_count": 1}, base)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-preload-dataset", "02-precompute-samples"]


def test_a_fix_rejected_while_another_bottleneck_ruled_is_tried_again_once_the_stack_is_much_faster(
        tmp_path):
    """A fix cannot pay while another cost rules the step (defer-syncs while the step waits
    for data: on an H100 it was rejected twice there and never came back). Once kept
    fixes make the stack rungs.RETRY_SPEEDUP times faster, a fix rejected as not faster that the
    rules still propose runs again, and only then."""
    speeds = {(): [100.0], ("channels-last",): [99.0], ("set-to-none",): [90.0],
              ("set-to-none", "channels-last"): [89.5], ("set-to-none", "tf32"): [40.0],
              ("set-to-none", "tf32", "channels-last"): [30.0]}
    # the rules (on every kept stack's trace) keep proposing the same fixes
    result, _, _ = ladder(tmp_path, speeds, [_finding("channels-last", 5.0), _finding("set-to-none", 4.0)],
                          rules=[_finding("channels-last", 5.0), _finding("tf32", 3.5)])
    names = [t["name"] for t in result["trials"]]
    # rejected at 100 ms; not retried after set-to-none (90 ms: not 1.5x faster); retried
    # after tf32 (40 ms), where it pays
    assert names == ["00-baseline-repeat", "01-channels-last", "02-set-to-none", "03-tf32", "04-channels-last"]
    assert _rec(result, "01-")["status"] == "rejected" and _rec(result, "04-")["status"] == "accepted"
    assert "tried again after the stack changed" in _rec(result, "04-")["reason"]
    assert [c["name"] for c in result["stack"]] == ["set-to-none", "tf32", "channels-last"]


PAIR = "channels-last + amp(dtype=bfloat16)"


RIDE = f"{RO} + amp(dtype=bfloat16)"


def test_a_fix_rejected_on_a_busy_gpu_is_tried_again_once_the_gpu_bounds_it(tmp_path):
    """AMP rejected with the GPU idle 45% of the step (not host-bound: it does not ride with
    compile); compile then takes the idle share to 20% while the step gets only 1.4x faster:
    the bottleneck moved, so AMP runs again."""
    amp, ro = "amp(dtype=bfloat16)", RO
    speeds = {(): [100.0], (amp,): [101.0], (ro,): [70.0], (ro, amp): [50.0]}
    idle = {(amp,): 0.45, (ro,): 0.2, (ro, amp): 0.1}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("amp", 5.0), _finding("torch-compile", 1.0)],
                              environment={"gpu_count": 1}, rules=[_finding("amp", 5.0)], idle=idle)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-amp", "02-torch-compile-reduce-overhead", "03-amp"]
    assert _rec(result, "03-")["status"] == "accepted"
    assert "tried again after the stack changed" in _rec(result, "03-")["reason"]


def test_a_fix_rejected_on_a_host_bound_step_rides_with_compile(tmp_path):
    """AMP cannot show while the host bounds the step (the GPU idles 70% of it): it is
    trialled together with torch-compile, in one process that compiles one graph, not in a
    compiled process of its own after compile's (48.6 s for that one on an H100)."""
    amp = "amp(dtype=bfloat16)"
    speeds = {(): [100.0], (amp,): [101.0], (RIDE,): [45.0]}
    result, calls, lines = ladder(tmp_path, speeds, [_finding("amp", 5.0), _finding("torch-compile", 1.0)],
                                  environment={"gpu_count": 1}, rules=[_finding("amp", 5.0)],
                                  idle={(amp,): 0.7, (RIDE,): 0.1}, lookahead=2)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-amp", "02-torch-compile-reduce-overhead+amp"]
    assert _rec(result, "02-")["status"] == "accepted" and _rec(result, "02-")["members"] == RIDE.split(" + ")
    assert [c["name"] for c in result["stack"]] == ["torch-compile", "amp"]
    assert any("rejected while the GPU idled" in line for line in lines)
    assert "rejected while the GPU idled" in _rec(result, "02-")["rung_note"]  # the report says why
    assert "rung_note" not in _rec(result, "01-")
    assert calls[2][:3] in calls[1][3]  # and it was guessed while AMP ran


def test_compile_runs_alone_when_its_riders_do_not_pay_and_they_are_not_tried_again(tmp_path):
    """On a host-bound NCHW conv net channels_last + AMP and channels_last alone were both
    rejected: both ride with compile. That rung rejected, compile runs alone (its fallback)
    and is kept; the riders had their retry with it and do not come back."""
    base = {**_timed(100.0), "config": {"parameters": {"value": {"conv_memory_format": "contiguous"}}}}
    ride = f"{RO} + channels-last + amp(dtype=bfloat16)"
    speeds = {(): [100.0], (PAIR,): [101.0], ("channels-last",): [99.5], (ride,): [104.0], (RO,): [70.0]}
    idle = {(PAIR,): 0.7, ("channels-last",): 0.7, (ride,): 0.6, (RO,): 0.1}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("amp", 5.0), _finding("torch-compile", 1.0)],
                              environment={"gpu_count": 1}, baseline=base, rules=[_finding("amp", 5.0)], idle=idle,
                              lookahead=3)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-channels-last+amp", "02-channels-last",
                                     "03-torch-compile-reduce-overhead+channels-last+amp",
                                     "04-torch-compile-reduce-overhead"]
    assert _rec(result, "03-")["status"] == "rejected" and _rec(result, "04-")["status"] == "accepted"
    assert [c["name"] for c in result["stack"]] == ["torch-compile"]
    # guessed while the rung with riders ran: compile alone, the riders not added back to it
    assert calls[4][:3] in calls[3][3], calls[3][3]
    # while channels_last ran (the pair rejected before it), compile's rung on the branch where
    # it is rejected too carries each rider once
    assert ("03-torch-compile-reduce-overhead+channels-last+amp", (ride,), True) in calls[2][3], calls[2][3]


def test_no_retry_while_the_bottleneck_stays(tmp_path):
    """TF32 makes the step 2x faster, the GPU as idle as before, and compile is still
    to come: AMP (rejected host-bound) is not tried again on its own, it rides with compile."""
    amp = "amp(dtype=bfloat16)"
    speeds = {(): [100.0], (amp,): [101.0], ("tf32",): [50.0], ("tf32", amp): [50.5],
              ("tf32", RIDE): [20.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("amp", 5.0), _finding("tf32", 2.0),
                                                            _finding("torch-compile", 1.0)],
                              environment={"gpu_count": 1}, rules=[_finding("amp", 5.0), _finding("torch-compile", 1.0)],
                              idle={(amp,): 0.7, ("tf32",): 0.6})
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-amp", "02-tf32",
                                     "03-torch-compile-reduce-overhead+amp"]


@pytest.mark.parametrize("conv_format,paired", [("contiguous", True), (None, False), ("channels_last", False)])
def test_amp_on_nchw_convolutions_is_trialled_with_channels_last(tmp_path, conv_format, paired):
    """bf16 convolutions want NHWC: AMP alone on an NCHW conv net, and channels_last alone in
    fp32, may each measure no faster (on an H100 under torch.compile: -1.5% and +1.5%)
    while both together are the tuned recipe. On such a model AMP and channels_last run as one
    rung, whether or not a rule proposed channels_last; without NCHW convolutions AMP goes
    alone."""
    base = {**_timed(100.0), "config": {"parameters": {"value": {"conv_memory_format": conv_format}}}}
    speeds = {(): [100.0], ("amp(dtype=bfloat16)",): [110.0], (PAIR,): [50.0], ("set-to-none",): [99.5],
              (PAIR, "set-to-none"): [49.8]}
    result, calls, lines = ladder(tmp_path, speeds, [_finding("amp", 50.0), _finding("set-to-none", 4.0)],
                                  baseline=base)
    names = [t["name"] for t in result["trials"]]
    if paired:
        assert names == ["00-baseline-repeat", "01-channels-last+amp", "02-set-to-none"]
        assert _rec(result, "01-")["status"] == "accepted" and _rec(result, "01-")["members"] == PAIR.split(" + ")
        assert [c["name"] for c in result["stack"]] == ["channels-last", "amp"]
        assert any("trialled together" in line for line in lines)
    else:
        assert names == ["00-baseline-repeat", "01-amp", "02-set-to-none"]
        assert result["stack"] == []


def test_a_queued_channels_last_joins_amp_and_runs_alone_when_the_pair_is_not_kept(tmp_path):
    """channels_last proposed by a rule joins AMP's rung (not run twice); the pair rejected,
    channels_last is tried alone (in fp32 NHWC can still pay)."""
    base = {**_timed(100.0), "config": {"parameters": {"value": {"conv_memory_format": "contiguous"}}}}
    speeds = {(): [100.0], (PAIR,): [104.0], ("channels-last",): [80.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("amp", 5.0), _finding("channels-last", 25.0)],
                              baseline=base)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-channels-last+amp", "02-channels-last"]
    assert _rec(result, "01-")["status"] == "rejected" and _rec(result, "02-")["status"] == "accepted"
    assert _rec(result, "02-")["origin"] == "ADV000"  # the rule's own candidate


def test_torch_compile_waits_until_the_other_fixes_were_tried(tmp_path):
    """Every trial after compile pays a new compile: it goes after the other queued fixes,
    whatever its estimated gain, and before the batch-size trials measured apart."""
    speeds = {(): [100.0], ("tf32",): [80.0], ("tf32", RO): [40.0], ("tf32", RO, "batch-size(factor=2)"): [70.0]}
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8}}}}
    result, calls, _ = ladder(tmp_path, speeds,
                              [_finding("torch-compile", 50.0), _finding("batch-size", 30.0), _finding("tf32", 5.0)],
                              environment={"gpu_count": 1}, baseline=base)
    assert [c[0] for c in calls][:3] == ["00-baseline-repeat", "01-tf32", "02-torch-compile-reduce-overhead"]
    assert calls[3][0] == "apart-batch-size-x2"


BUNDLE = "set-to-none + cudnn-benchmark + fused-optimizer"


def test_small_safe_fixes_are_trialled_together_as_one_rung(tmp_path):
    """set_to_none, cudnn.benchmark and fused optimizers are worth a few % each, inside the
    noise one at a time: the queued ones run as one trial, and when it is kept the stack holds
    each of them (the patch writes each edit)."""
    base = {**_timed(100.0), "config": {"optimizer": {"value": {"class": "SGD"}}}}
    speeds = {(): [100.0], ("tf32",): [60.0], ("tf32", BUNDLE): [52.0]}
    result, calls, lines = ladder(tmp_path, speeds,
                                  [_finding("tf32", 20.0), _finding("set-to-none", 3.0),
                                   _finding("cudnn-benchmark", 2.0), _finding("fused-optimizer", 1.0)], baseline=base)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-tf32", "02-set-to-none+cudnn-benchmark+fused-optimizer"]
    rung = _rec(result, "02-")
    assert rung["status"] == "accepted" and rung["members"] == ["set-to-none", "cudnn-benchmark", "fused-optimizer"]
    assert rung["interventions"] == ["tf32", BUNDLE]
    assert [c["name"] for c in result["stack"]] == ["tf32", "set-to-none", "cudnn-benchmark", "fused-optimizer"]
    assert any("trialled together" in line for line in lines)


def test_named_fixes_are_measured_each_on_their_own(tmp_path):
    """--fix names what to trial: no bundle, and no partner the user did not name."""
    base = {**_timed(100.0), "config": {"parameters": {"value": {"conv_memory_format": "contiguous"}}}}
    speeds = {(): [100.0], ("set-to-none",): [90.0], ("set-to-none", "cudnn-benchmark"): [80.0],
              ("set-to-none", "cudnn-benchmark", "amp(dtype=bfloat16)"): [70.0]}
    _, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 3.0), _finding("cudnn-benchmark", 2.0),
                                                          _finding("amp", 1.0)],
                         baseline=base, only={"set-to-none", "cudnn-benchmark", "amp"})
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-set-to-none", "02-cudnn-benchmark", "03-amp"]


def test_a_bundle_leaves_out_a_member_that_cannot_apply(tmp_path):
    """No optimizer observed: fused-optimizer is recorded as skipped, with why, and the others
    still run together."""
    speeds = {(): [100.0], ("set-to-none + cudnn-benchmark",): [90.0]}
    result, calls, _ = ladder(tmp_path, speeds,
                              [_finding("set-to-none", 3.0), _finding("cudnn-benchmark", 2.0),
                               _finding("fused-optimizer", 1.0)])
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-set-to-none+cudnn-benchmark"]
    assert _rec(result, "fused-optimizer")["status"] == "skipped"
    assert "optimizer" in _rec(result, "fused-optimizer")["reason"]


def test_a_member_refused_in_the_child_is_named_in_the_verdict(tmp_path):
    """A member that declined at run time (notes) does not void the rung: the verdict rests on
    the others and says which one did not apply."""
    from advisor.runtime.patching import NOT_APPLIED

    refused = {**_timed(90.0), "notes": [f"{NOT_APPLIED} cudnn-benchmark: the script sets it itself"]}
    speeds = {(): [100.0], ("set-to-none + cudnn-benchmark",): refused}
    result, _, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 3.0), _finding("cudnn-benchmark", 2.0)])
    rung = _rec(result, "01-")
    assert rung["status"] == "accepted"
    assert "cudnn-benchmark did not apply: the script sets it itself" in rung["reason"]


def test_a_rejected_bundle_comes_back_once_the_stack_is_much_faster(tmp_path):
    """Rejected as not faster, a bundle's members are proposed again (by the rules, one by
    one) after the stack runs rungs.RETRY_SPEEDUP times faster, and run together again."""
    speeds = {(): [100.0], ("set-to-none + cudnn-benchmark",): [99.0], ("tf32",): [40.0],
              ("tf32", "set-to-none + cudnn-benchmark"): [30.0]}
    found = [_finding("set-to-none", 8.0), _finding("cudnn-benchmark", 2.0), _finding("tf32", 65.0)]
    result, _, _ = ladder(tmp_path, speeds, found, rules=found)
    names = [t["name"] for t in result["trials"]]
    assert names == ["00-baseline-repeat", "01-set-to-none+cudnn-benchmark", "02-tf32",
                     "03-set-to-none+cudnn-benchmark"]
    assert _rec(result, "01-")["status"] == "rejected" and _rec(result, "03-")["status"] == "accepted"
    assert "tried again after the stack changed" in _rec(result, "03-")["reason"]


@pytest.mark.parametrize("x2_step_ms,runs_x4", [(120.0, True), (198.0, False)])
def test_batch_size_x4_runs_only_after_x2_paid(tmp_path, x2_step_ms, runs_x4):
    """Batch-size factors are measured apart, on top of the kept fixes; x4 only when x2 was
    faster beyond the threshold per sample (twice the batch in 120 ms against 8 samples in
    100 ms: +67%; in 198 ms: +1%)."""
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8}}}}
    step_ms = {(): 100.0, ("batch-size(factor=2)",): x2_step_ms, ("batch-size(factor=4)",): 200.0}

    class TimedBatch(trials.TrialRunner):
        def process(self, ctx, name, stack, profile=True, guesses=None):
            keys = tuple(c.key for c in stack)
            factor = stack[-1].params.get("factor", 1) if stack else 1
            return _timed(step_ms[keys], batch=8 * factor), None, None

        def ceiling(self, after, name=None):
            return None

    ctx = trials.TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                              baseline=base, environment={}, progress=lambda s: None,
                              baseline_findings=[_finding("batch-size", 1.0)], runner=TimedBatch())
    result = trials.run_trials(ctx)
    x2, x4 = _rec(result, "apart-batch-size-x2"), _rec(result, "apart-batch-size-x4")
    if runs_x4:
        assert x2["status"] == x4["status"] == "measured"
    else:
        assert x2["status"] == "rejected"
        assert x4["status"] == "not run" and "was not faster" in x4["reason"]


@pytest.mark.parametrize("allow", [frozenset(), frozenset({"nondeterministic"})])
def test_a_fix_overriding_the_users_determinism_is_measured_apart_unless_allowed(tmp_path, allow):
    """A script that sets cudnn.deterministic keeps it: cudnn.benchmark is not bundled or kept,
    it is measured on top of the kept fixes and says why it stays out of fixes.patch; --allow
    nondeterministic trials it as any other fix."""
    base = {**_timed(100.0), "config": {"cudnn.deterministic": {"value": True, "where": "train.py:12"}}}

    class ByFix(trials.TrialRunner):
        def process(self, ctx, name, stack, profile=True, guesses=None):
            names = {p.name for c in stack for p in c.parts}
            return _timed(100.0 - 10 * ("set-to-none" in names) - 10 * ("cudnn-benchmark" in names)), None, None

        def ceiling(self, after, name=None):
            return None

    ctx = trials.TrialContext(script="train.py", script_args=[], run_dir=tmp_path, opts=specs.AnalyzeOptions(),
                              baseline=base, environment={}, progress=lambda s: None, allow=allow,
                              baseline_findings=[_finding("cudnn-benchmark", 5.0), _finding("set-to-none", 3.0)],
                              runner=ByFix())
    result = trials.run_trials(ctx)
    kept = [s["name"] for s in result["stack"]]
    if allow:
        assert "cudnn-benchmark" in kept and not [t for t in result["trials"] if t.get("apart")]
        return
    assert kept == ["set-to-none"]
    rec = _rec(result, "apart-cudnn-benchmark")
    assert rec["apart"] and rec["status"] == "measured" and rec["interventions"] == ["set-to-none", "cudnn-benchmark"]
    assert rec["overrides"] == "torch.backends.cudnn.deterministic = True at train.py:12"
    assert "changes reproducibility" in rec["reason"] and "--allow nondeterministic" in rec["reason"]


def test_the_users_reproducibility_choices_that_cudnn_benchmark_would_override():
    from advisor import fixes

    fix = fixes.get("cudnn-benchmark")
    assert fix.overrides({}) is None
    assert fix.overrides({"cudnn.benchmark": {"value": False, "where": None}}) is None      # torch's default
    assert fix.overrides({"cudnn.benchmark": {"value": False, "where": "t.py:3"}}) == \
        "torch.backends.cudnn.benchmark = False at t.py:3"
    assert fix.overrides({"deterministic_algorithms": {"value": True, "where": "t.py:4"}}) == \
        "torch.use_deterministic_algorithms(True) at t.py:4"
    assert fixes.get("set-to-none").overrides({"cudnn.deterministic": {"value": True}}) is None


def test_the_users_precision_choices_that_tf32_and_amp_would_override():
    """Full float32 products or a float64 model written in the script are explicit precision
    choices: tf32 and amp are then measured apart, and --allow precision lets them in."""
    from advisor import fixes

    tf32, amp = fixes.get("tf32"), fixes.get("amp")
    assert tf32.allowed_by == amp.allowed_by == "precision"
    assert tf32.overrides({"tf32.matmul": {"value": False, "where": None}}) is None   # torch's default
    assert tf32.overrides({"tf32.matmul": {"value": False, "where": "t.py:5"}}) == \
        "torch.backends.cuda.matmul.allow_tf32 = False at t.py:5"
    assert tf32.overrides({"tf32.cudnn": {"value": False, "where": "t.py:6"}}) == \
        "torch.backends.cudnn.allow_tf32 = False at t.py:6"
    assert tf32.overrides({"float32_matmul_precision": {"value": "highest", "where": "t.py:7"}}) == \
        'torch.set_float32_matmul_precision("highest") at t.py:7'
    assert tf32.overrides({"float32_matmul_precision": {"value": "high", "where": "t.py:7"},
                           "tf32.matmul": {"value": True, "where": "t.py:7"}}) is None
    assert amp.overrides({"parameters": {"value": {"dtype": "float32"}, "where": "t.py:9"}}) is None
    assert amp.overrides({"parameters": {"value": {"dtype": "float64"}, "where": "t.py:9"}}) == \
        "a float64 model (its first forward at t.py:9)"
    # nanoGPT's dtype = 'float32': its own autocast, in float32, is its precision
    assert amp.overrides({"autocast": {"value": {"enabled": True, "dtype": "float32"}, "where": "train.py:211"}}) == \
        "autocast with dtype float32 (at train.py:211)"
    assert amp.overrides({"autocast": {"value": {"enabled": True, "dtype": "bfloat16"}, "where": "t.py:2"}}) is None
    assert amp.overrides({"autocast": {"value": {"enabled": False, "dtype": "float32"}, "where": "t.py:2"}}) is None


def test_each_trial_was_guessed_while_the_one_before_it_ran(tmp_path):
    """advisor.trials.lookahead: with each process the ladder names the trials likely to come next
    (the next rung if this fix is kept, and if it is not), by its own choice of rungs (pairs,
    bundles, compile last, batch size apart). Here the rules propose nothing new after a kept
    fix, so every trial is one of the guesses made while the process before it ran."""
    base = {**_timed(100.0), "startup": {"cuda_init": 1.0, "first_step": 2.0},
            "config": {"parameters": {"value": {"conv_memory_format": "contiguous"}},
                       "dataloader": {"value": {"batch_size": 8}}}}
    speeds = {(): [100.0], (PAIR,): [60.0], (PAIR, "set-to-none + cudnn-benchmark"): [70.0],
              (PAIR, RO): [30.0], (PAIR, RO, "batch-size(factor=2)"): _timed(50.0, batch=16),
              (PAIR, RO, "batch-size(factor=4)"): _timed(90.0, batch=32)}
    findings = [_finding("amp", 5.0), _finding("set-to-none", 1.0), _finding("cudnn-benchmark", 0.5),
                _finding("torch-compile", 0.2), _finding("batch-size", 0.1)]
    result, calls, _ = ladder(tmp_path, speeds, findings, environment={"gpu_count": 1},
                              baseline=base, lookahead=2)
    names = [c[0] for c in calls]
    assert names == ["00-baseline-repeat", "01-channels-last+amp", "02-set-to-none+cudnn-benchmark",
                     "03-torch-compile-reduce-overhead", "apart-batch-size-x2", "apart-batch-size-x4"], names
    for before, now in zip(calls, calls[1:]):
        assert now[:3] in before[3], (now[:3], before[3])
    # both branches: the pair kept, the bundle on top; the pair rejected, channels_last alone;
    # then the process after next where the pair and the bundle are both kept (compile: the
    # longest start-up), the bundle where the pair and channels_last alone are both rejected
    # (cudnn.benchmark's search: a long start-up too), and the rung a new ranking of the queue
    # may put first on the kept pair
    assert calls[1][3] == [("02-set-to-none+cudnn-benchmark", (PAIR, "set-to-none + cudnn-benchmark"), True),
                           ("02-channels-last", ("channels-last",), True),
                           ("03-torch-compile-reduce-overhead", (PAIR, "set-to-none + cudnn-benchmark", RO), True),
                           ("03-set-to-none+cudnn-benchmark", ("set-to-none + cudnn-benchmark",), True),
                           ("02-torch-compile-reduce-overhead", (PAIR, RO), True)]
    # the pair's one run is the reference: the kept stack timed again is the other likely process
    assert ("02-set-to-none+cudnn-benchmark-reference", (PAIR,), False) in calls[2][3]
    # after the batch sizes, the data-free ceiling on the kept compute fixes: guessed beside both
    ceiling = ("ceiling-data-free", ("channels-last", "amp(dtype=bfloat16)", RO, "cached-batch"), False)
    assert calls[-2][3] == [ceiling, ("apart-batch-size-x4", (PAIR, RO, "batch-size(factor=4)"), True)]
    assert calls[-1][3] == [ceiling]
    # while compile runs, the first batch size and the other branch's next rung (compile's
    # default mode) come first; then the ceiling (it runs whatever x2 measures) and x4 (it
    # compiles a graph of its own, and runs only when x2 paid)
    guessed = [g[0] for g in calls[3][3]]
    assert guessed[0] == "apart-batch-size-x2"
    assert guessed.index("04-torch-compile-default") < guessed.index("ceiling-data-free") \
        < guessed.index("apart-batch-size-x4")
    # without --lookahead on a script that never used CUDA before its first step: no guesses
    _, calls, _ = ladder(tmp_path, speeds, findings, environment={"gpu_count": 1},
                         baseline={**base, "startup": {"first_step": 2.0}})
    assert all(c[3] == [] for c in calls), calls


def test_guesses_warm_up_on_the_gpu_only_where_memory_allows(tmp_path):
    """A guess goes on into its warm-up (CUDA, compile) beside the running trial only when the
    memory they are expected to reserve (what the last finished run reserved, times a
    batch-size factor, plus a CUDA context each) fits in lookahead.GPU_SHARE of the device, and
    only one of them compiles; else it waits at its first CUDA use."""
    from advisor.trials.lookahead import CONTEXT_BYTES, GPU_SHARE, Lookahead

    assert (GPU_SHARE, CONTEXT_BYTES) == (0.8, 1 << 30)  # 64 GiB of an 80 GiB device, below
    ahead = Lookahead(tmp_path, 2, None, False)
    plain = {"interventions": [{"name": "amp", "params": {}}]}
    x4 = {"interventions": [{"name": "batch-size", "params": {"factor": 4}}]}
    assert ahead._fits([plain, plain, plain]) == [False, False]  # nothing measured yet: at CUDA
    ahead.note({"memory": {"max_reserved_bytes": 40 << 30, "capacity_bytes": 80 << 30}})
    assert ahead._fits([plain, plain, plain]) == [False, False]  # 41 + 41 GiB
    ahead.note({"memory": {"max_reserved_bytes": 15 << 30, "capacity_bytes": 80 << 30}})
    ahead.note({"memory": {}})  # a run that reserved nothing (crashed before CUDA): no new estimate
    assert ahead.peak == 15 << 30
    assert ahead._fits([plain, plain, plain]) == [True, True]   # 16 + 16 + 16 GiB
    assert ahead._fits([plain, x4, plain]) == [False, True]     # x4 would need 61 more
    assert ahead._fits([x4, plain, plain]) == [False, False]    # the running x4 takes 61 alone
    compiled = {"interventions": [{"name": "torch-compile", "params": {"mode": "reduce-overhead"}}]}
    assert ahead._fits([compiled, compiled, compiled]) == [True, False]  # one compiling guess at a time
    x2 = {"interventions": [*compiled["interventions"], {"name": "batch-size", "params": {"factor": 2}}]}
    x4c = {"interventions": [*compiled["interventions"], {"name": "batch-size", "params": {"factor": 4}}]}
    ahead.note({"memory": {"max_reserved_bytes": 5 << 30, "capacity_bytes": 80 << 30}})
    assert ahead._fits([compiled, x2, x4c]) == [True, True]      # but x4 compiles beside x2 (6+11+21 GiB)
    assert ahead._fits([compiled, x2, x4c, compiled]) == [True, True, False]
    # a guess that waits after its warm-up already compiles no more: the next may compile
    assert ahead._fits([compiled, x2, compiled]) == [True, False]
    assert ahead._fits([compiled, x2, compiled], [True, False]) == [True, True]
    # as on an H100: the eager fp32 stack's cudnn.benchmark search reserved 16.5 GiB; while
    # compile runs on it, x2 compiles beside it (17.5 + 34 GiB), x4 (+67) waits at its CUDA use
    ahead.note({"memory": {"max_reserved_bytes": int(16.5 * (1 << 30)), "capacity_bytes": 80 << 30}})
    assert ahead._fits([compiled, x2, x4c]) == [True, False]


@pytest.mark.parametrize("at_most, tried", [(0.2, False), (2.0, True)])
def test_a_fix_whose_gain_is_at_most_under_what_can_be_confirmed_is_not_trialled_yet(
        tmp_path, at_most, tried):
    """A rule's estimate that is an upper bound (ADV110: the host gets back at most the time it
    waits in the syncs) under the threshold times the reference's step cannot be accepted: the
    trial is not run now (on an H100, deferring the syncs of an eager step that waited
    0.35 ms of 9.1 ms cost 16 s for -11% in the noise), and not marked tried, so the rules
    propose it again on the next kept stack."""
    speeds = {(): [100.0], ("set-to-none",): [50.0], ("set-to-none", "tf32"): [45.0]}
    bound = {**_finding("tf32", at_most), "gain_is_upper_bound": True}  # any rule's bound
    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 10.0), bound])
    names = [c[0] for c in calls]
    assert ("02-tf32" in names) is tried, names
    rec = next(t for t in result["trials"] if t["fix"] == "tf32")
    if not tried:  # 3% of 50 ms = 1.5 ms > 0.2 ms
        assert rec["status"] == "skipped" and "0.20 ms a step at most" in rec["reason"]


def test_a_fix_found_in_a_rejected_trials_trace_stays_queued_until_tried(tmp_path):
    """AMP on a host-bound eager step makes it launch-bound and measures no faster: its trace
    points at torch.compile. Without AMP the kept stack's trace does not (on an H100 the fp32
    step was GPU-bound), and compile is dropped when the rules re-run: it stays queued."""
    speeds = {(): [100.0], ("amp(dtype=bfloat16)",): [99.0], ("tf32",): [80.0], ("tf32", RO): [40.0]}

    def rules(keys):
        return [_finding("torch-compile", 30.0)] if "amp(dtype=bfloat16)" in keys else []

    result, calls, lines = ladder(tmp_path, speeds, [_finding("amp", 5.0), _finding("tf32", 1.0)],
                                  environment={"gpu_count": 1}, rules=rules)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-amp", "02-tf32", "03-torch-compile-reduce-overhead"]
    assert any("points at torch-compile" in line for line in lines)
    assert [c["name"] for c in result["stack"]] == ["tf32", "torch-compile"]


def test_torch_compile_once_queued_waits_for_its_turn_whatever_the_rules_say_later(tmp_path):
    """Compile goes after every other queued fix; a fix kept meanwhile can take the step just
    over ADV109's bar (on an H100: 71% -> 83% of the step busy) and the rules stop
    proposing it. It was queued on a kept stack's trace: it is still tried."""
    speeds = {(): [100.0], ("tf32",): [80.0], ("tf32", RO): [40.0]}

    def rules(keys):
        return [] if "tf32" in keys else [_finding("torch-compile", 30.0), _finding("tf32", 5.0)]

    result, calls, _ = ladder(tmp_path, speeds, [_finding("torch-compile", 30.0), _finding("tf32", 5.0)],
                              environment={"gpu_count": 1}, rules=rules)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-tf32", "02-torch-compile-reduce-overhead"]
    assert [c["name"] for c in result["stack"]] == ["tf32", "torch-compile"]


def test_a_fix_skipped_on_its_bound_is_guessed_once_the_queue_is_spent(tmp_path):
    """Deferring syncs is skipped while its bound is under what could be accepted; once compile
    is the last rung, the rules may ask for it again on the compiled trace (they did on an H100,
    and its process then started fresh: 21 s). It is guessed while compile runs."""
    bound = {**_finding("tf32", 0.2), "gain_is_upper_bound": True}
    speeds = {(): [100.0], (RO,): [40.0], (RO, "tf32"): [30.0]}

    def rules(keys):
        return [{**_finding("tf32", 20.0), "gain_is_upper_bound": True}] if RO in keys else []

    result, calls, _ = ladder(tmp_path, speeds, [_finding("torch-compile", 30.0), bound],
                              environment={"gpu_count": 1}, rules=rules, lookahead=2)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-torch-compile-reduce-overhead", "02-tf32"]
    assert _rec(result, "tf32")["status"] == "skipped"      # not trialled on its first bound
    assert calls[2][:3] in calls[1][3]                        # guessed while compile ran
    assert [c["name"] for c in result["stack"]] == ["torch-compile", "tf32"]


def test_the_bound_floor_uses_the_noise_of_the_references_own_regime(tmp_path):
    """The baseline pair spreads 30% (loader-bound); compile then runs 20x faster, where
    nothing was timed twice. A bound of 6% of the compiled step is under the 30%-noise floor but
    over the 3% one: deferring the syncs is tried (judged by the loader-bound noise, one that
    gives +12.6% on an H100 would be skipped)."""
    bound = {**_finding("tf32", 0.3), "gain_is_upper_bound": True}  # 0.3 ms of a 5 ms step
    speeds = {(): [130.0], (RO,): [5.0], (RO, "tf32"): [4.4]}  # the baseline ran at 100 ms
    result, calls, _ = ladder(tmp_path, speeds, [_finding("torch-compile", 30.0)],
                              environment={"gpu_count": 1}, rules=lambda keys: [bound] if RO in keys else [])
    assert [c[0] for c in calls][:3] == ["00-baseline-repeat", "01-torch-compile-reduce-overhead", "02-tf32"]
    assert [c["name"] for c in result["stack"]] == ["torch-compile", "tf32"]


def test_compile_runs_alone_after_its_rung_with_riders_crashed(tmp_path):
    """The rung of compile and its riders crashed: compile alone runs next (the fallback), not
    the same rung again."""
    amp = "amp(dtype=bfloat16)"
    crashed = {"status": "incomplete", "incomplete_reasons": ["script raised RuntimeError: boom at step 3"],
               "exit": {"code": 1, "exception": "RuntimeError: boom"}, "step_times_ms": [], "losses": []}
    speeds = {(): [100.0], (amp,): [101.0], (RIDE,): crashed, (RO,): [40.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("amp", 5.0), _finding("torch-compile", 1.0)],
                              environment={"gpu_count": 1}, rules=[_finding("amp", 5.0)], idle={(amp,): 0.7})
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-amp", "02-torch-compile-reduce-overhead+amp",
                                     "03-torch-compile-reduce-overhead"]
    assert _rec(result, "02-")["status"] == "failed"
    assert [c["name"] for c in result["stack"]] == ["torch-compile"]


def test_a_rung_with_riders_that_cannot_apply_falls_back_to_compile_alone():
    """rungs.pick, pure: compile's rung with a rider that cannot apply here is skipped, and
    compile alone is picked (no loop back to the same rung)."""
    from advisor.trials import rungs
    from advisor.trials.candidates import Candidate

    compile_ro = expand({"intervention": "torch-compile"}, None, 1.0, {"gpu_count": 1})[0]
    rider = Candidate("amp", {"dtype": "float16"})  # fp16 autocast: suggest-only, cannot apply
    p = rungs.pick([compile_ro], set(), set(), config={}, environment={"gpu_count": 1}, riders=(rider,))
    assert p.rung is not None and p.rung.key == RO
    assert [c.key for c, _ in p.skipped] == [f"{RO} + amp(dtype=float16)"]


def test_what_the_rules_ask_for_once_a_fix_is_in_is_guessed_while_it_runs(tmp_path):
    """ADV118 (the loop still waits for batches with DataLoader workers) fires only once
    workers are in; its AFTER names them, so the preload it asks for is started ahead while the
    last worker count runs (started fresh, that process took 18.8 s on an H100, not 4-13)."""
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8, "num_workers": 0}}}}
    env = {"gpu_count": 1, "cpu_count": 8}
    w4, w8 = (c.key for c in expand({"intervention": "dataloader-workers"}, None, None, env))
    speeds = {(): [100.0], (w4,): [60.0], (w8,): [50.0], (w8, "preload-dataset"): [20.0],
              (w8, "preload-dataset", "set-to-none"): [19.9]}

    def rules(keys):
        if w8 in keys and "preload-dataset" not in keys:
            return [_finding("preload-dataset", 30.0), _finding("set-to-none", 1.0)]
        return [_finding("set-to-none", 1.0)]

    result, calls, _ = ladder(tmp_path, speeds, [_finding("dataloader-workers", 50.0),
                                                              _finding("set-to-none", 1.0)],
                              environment=env, baseline=base, rules=rules, lookahead=3)
    names = [c[0] for c in calls]
    assert names[:5] == ["00-baseline-repeat", "01-dataloader-workers-4", "02-dataloader-workers-8",
                         "03-preload-dataset", "04-set-to-none"], names
    assert calls[3][:3] in calls[2][3], calls[2][3]  # guessed while workers-8 ran
    assert calls[3][:3] not in calls[1][3]           # not while workers-4 did: workers-8 comes first
    assert ("03-preload-dataset", (w8, "preload-dataset"), True) == calls[2][3][-1]  # after the branches


@pytest.mark.parametrize("item_on_gpu", [True, False])
def test_deferred_syncs_are_guessed_while_compile_runs(tmp_path, item_on_gpu):
    """ADV110 names torch-compile in its AFTER: a .item() per step costs most once compile has
    made the step short, and on an H100 the rules first ask for deferred syncs on
    compile's trace; unguessed, that trial starts from a spare (18-28 s). Compile is the last rung,
    so its kept branch guesses what follows the queue (the batch sizes) and also the fix its
    rules ask for first too, where it applies: the script read a device scalar each step."""
    sites = {"train.py:12": {"device": item_on_gpu, "count": 2}}
    base = {**_timed(100.0), "config": {"item_calls": {"value": {"sites": sites}}}}
    speeds = {(): [100.0], (RO,): [40.0], (RO, "defer-syncs"): [30.0]}

    def rules(keys):
        return [_finding("defer-syncs", 10.0)] if RO in keys and "defer-syncs" not in keys else []

    result, calls, _ = ladder(tmp_path, speeds, [_finding("torch-compile", 30.0)],
                              environment={"gpu_count": 1}, baseline=base, rules=rules, lookahead=5)
    names = [c[0] for c in calls]
    assert names[:2] == ["00-baseline-repeat", "01-torch-compile-reduce-overhead"], names
    guessed = [g[:2] for g in calls[1][3]]
    assert (("02-defer-syncs", (RO, "defer-syncs")) in guessed) is item_on_gpu, guessed
    if item_on_gpu:
        assert names[2] == "02-defer-syncs" and calls[2][:3] in calls[1][3]


def test_a_slow_starting_rung_two_rejections_ahead_is_guessed_and_goes_on(tmp_path):
    """When channels_last and then deferred syncs are rejected on the eager step, the small
    safe fixes come next on the same stack: their first step searches cudnn's algorithms
    (24.8 s on an H100), and on a process started only one trial before that puts 33.7 s on
    the critical path. The guess made on that stack two trials earlier is dropped when both
    branches put deferred syncs first. So the rung after the next one on the stack without the
    fix is guessed too when its process is long to start (rungs.slow_start), and it goes on."""
    speeds = {(): [100.0], ("tf32",): [101.0], ("channels-last",): [100.5], ("cudnn-benchmark",): [80.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("tf32", 5.0), _finding("channels-last", 3.0),
                                                              _finding("cudnn-benchmark", 25.0)],
                              environment={"gpu_count": 1}, lookahead=5)
    names = [c[0] for c in calls]
    assert names[:4] == ["00-baseline-repeat", "01-tf32", "02-channels-last", "03-cudnn-benchmark"], names
    # guessed while tf32 ran (two ahead, where tf32 and channels_last are both rejected), and
    # again while channels_last ran (one ahead): one process, on its way
    assert ("03-cudnn-benchmark", ("cudnn-benchmark",), True) in calls[1][3], calls[1][3]
    assert calls[3][1:3] in [g[1:] for g in calls[2][3]], calls[2][3]
    # a rung quick to start is not guessed two rejections ahead (while the repeat ran, tf32
    # came next and channels_last after it)
    assert not any(g[1] == ("channels-last",) for g in calls[0][3]), calls[0][3]


def test_a_fix_skipped_on_its_bound_is_guessed_beside_the_next_rung(tmp_path):
    """Deferred syncs (here tf32 as a stand-in) skipped on their bound, with compile still to
    come: a kept fix that makes the step faster may lift the bound over the floor on the new
    trace (it did after the small safe fixes on an H100, and that process started fresh:
    17.6 s). While the fix runs, it is guessed beside compile, the next rung."""
    bound = {**_finding("tf32", 0.2), "gain_is_upper_bound": True}
    speeds = {(): [100.0], ("set-to-none",): [50.0], ("set-to-none", "tf32"): [40.0],
              ("set-to-none", "tf32", RO): [20.0]}

    def rules(keys):
        lifted = [{**_finding("tf32", 20.0), "gain_is_upper_bound": True}] if "tf32" not in keys else []
        return [*lifted, _finding("torch-compile", 30.0)]

    result, calls, _ = ladder(tmp_path, speeds, [_finding("torch-compile", 30.0),
                                                              _finding("set-to-none", 10.0), bound],
                              environment={"gpu_count": 1}, rules=rules, lookahead=3)
    names = [c[0] for c in calls]
    assert names[:4] == ["00-baseline-repeat", "01-set-to-none", "02-tf32", "03-torch-compile-reduce-overhead"], names
    assert calls[1][3][0] == ("02-torch-compile-reduce-overhead", ("set-to-none", RO), True)  # the next rung
    assert calls[2][:3] in calls[1][3]  # and the bound one beside it


def test_a_round_after_the_reference_was_timed_again_was_guessed_while_it_ran(tmp_path):
    """The kept stack's one run is timed again (its regime had no noise of its own), and the
    pair spreads 10%: the +14% trial is still unsure, and a confirmation round follows. The
    round's first run, the kept stack once more, was started ahead while the reference ran
    (unguessed, that process compiles on the critical path: 23.7 s on an H100)."""
    speeds = {(): [125.0], ("set-to-none",): [20.0, 22.0, 21.0], ("set-to-none", "channels-last"): [18.4, 18.6]}
    result, calls, _ = ladder(tmp_path, speeds,
                              [_finding("set-to-none", 110.0), _finding("channels-last", 5.0)], lookahead=3)
    names = [c[0] for c in calls]
    assert names[:6] == ["00-baseline-repeat", "01-set-to-none", "02-channels-last", "02-channels-last-reference",
                         "02-channels-last-confirm1-reference", "02-channels-last-confirm1"], names
    assert ("set-to-none",) == calls[4][1] and calls[4][1:3] in [g[1:] for g in calls[3][3]], calls[3][3]
    # once: the kept stack timed again is one process, whatever it is called
    assert [g[1:] for g in calls[3][3]].count((("set-to-none",), False)) == 1


def test_a_fix_a_kept_fix_brings_back_was_guessed_while_that_fix_ran(tmp_path):
    """TF32 (here the stand-in for deferred syncs) is rejected; compile then makes the step
    2.5x faster, and the rules ask for it again: it is retried (rungs.worth_retrying). That
    retry is guessed while compile runs (started fresh, it takes 25.6 s on an H100)."""
    speeds = {(): [100.0], ("set-to-none",): [50.0], ("set-to-none", "tf32"): [50.2],
              ("set-to-none", RO): [20.0], ("set-to-none", RO, "tf32"): [15.0]}

    def rules(keys):
        return [_finding("tf32", 5.0), _finding("torch-compile", 30.0)] if RO not in keys else [_finding("tf32", 5.0)]

    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 10.0), _finding("tf32", 5.0),
                                                              _finding("torch-compile", 30.0)],
                              environment={"gpu_count": 1}, rules=rules, lookahead=3)
    names = [c[0] for c in calls]
    assert names == ["00-baseline-repeat", "01-set-to-none", "02-tf32", "03-torch-compile-reduce-overhead",
                     "04-tf32"], names
    assert "tried again after the stack changed" in _rec(result, "04-")["reason"]
    assert calls[4][:3] in calls[3][3], calls[3][3]


def test_a_fix_the_rules_stopped_asking_for_is_guessed_while_the_next_rung_runs(tmp_path):
    """A finding near its threshold flickers: TF32 is asked for on the baseline, not on the
    trace of the first kept fix, and again on the next one's. While that next fix runs, TF32
    is among the guesses (deferred syncs started fresh so take 17.5 s on an H100)."""
    speeds = {(): [100.0], ("set-to-none",): [50.0], ("set-to-none", "cudnn-benchmark"): [40.0],
              ("set-to-none", "cudnn-benchmark", "tf32"): [30.0]}

    def rules(keys):
        if "cudnn-benchmark" in keys:
            return [_finding("tf32", 5.0)] if "tf32" not in keys else []
        return [_finding("cudnn-benchmark", 3.0)]

    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 10.0), _finding("tf32", 5.0)],
                              rules=rules, lookahead=3)
    names = [c[0] for c in calls]
    assert names == ["00-baseline-repeat", "01-set-to-none", "02-cudnn-benchmark", "03-tf32"], names
    assert calls[3][:3] in calls[2][3], calls[2][3]


def test_guesses_are_fitted_again_with_what_the_running_trial_reserved_through_its_warm_up(tmp_path):
    """The eager stack before compile reserved 16.5 GiB (its cudnn.benchmark search): while
    compile runs, the 4x batch guessed beside it does not fit (4 x 16.5 GiB) and waits at its
    CUDA use. Compile's "measuring" record says it reserved 1.2 GiB through its warm-up: once
    its window is over, the 4x batch goes on into its warm-up (else it compiles on the
    critical path: 37.5 s on an H100)."""
    from advisor.trials.lookahead import Lookahead

    class Guess:
        def __init__(self, spec, warm=False):
            self.spec, self.hold_at, self.advanced, self.paused = spec, "warmup" if warm else "cuda", 0, False

        def alive(self):
            return True

        def warmed_up(self):
            return self.hold_at == "warmup"

        def advance(self):
            if self.hold_at != "cuda":
                return False
            self.hold_at, self.advanced = "warmup", self.advanced + 1
            return True

        def pause(self):
            self.paused = True

        def resume(self):
            self.paused = False

    gib = 1 << 30
    compiled = [{"name": "torch-compile", "params": {"mode": "reduce-overhead"}}]
    running = {"interventions": compiled, "run_name": "09-torch-compile"}
    x2 = Guess({"interventions": [*compiled, {"name": "batch-size", "params": {"factor": 2}}]}, warm=True)
    x4 = Guess({"interventions": [*compiled, {"name": "batch-size", "params": {"factor": 4}}], "run_name": "x4"})
    ahead = Lookahead(tmp_path, 2, None, False)
    ahead.note({"memory": {"max_reserved_bytes": int(16.5 * gib), "capacity_bytes": 80 * gib}})
    ahead.running, ahead.guesses = running, [x2, x4]
    assert ahead._fits([running, x2.spec, x4.spec], [True, False]) == [True, False]
    ahead.on_stage("measuring", 5, {"reserved_bytes": int(1.2 * gib), "capacity_bytes": 80 * gib})
    assert x4.paused and x4.advanced == 0  # nothing moves while the window is timed
    ahead.on_stage("exporting", 30)
    assert not x4.paused and x4.advanced == 1 and ahead.peak == int(1.2 * gib)
    ahead.on_stage("done", 33)  # once
    assert x4.advanced == 1
    # a trial that reserved nothing through its warm-up (no CUDA yet) changes no estimate
    ahead.note({"memory": {"max_reserved_bytes": int(16.5 * gib), "capacity_bytes": 80 * gib}})
    ahead.on_stage("measuring", 5, {})
    ahead.on_stage("exporting", 30)
    assert ahead.peak == int(16.5 * gib)


def test_a_rider_that_comes_back_alone_was_guessed_too(tmp_path):
    """AMP was rejected on a host-bound step (it would ride with compile); TF32 then makes the
    step 2x faster and the GPU busy (idle 20%): AMP is retried alone before compile. That
    process is guessed while TF32 runs (started fresh, it takes 15.6 s on an H100)."""
    amp = "amp(dtype=bfloat16)"
    speeds = {(): [100.0], (amp,): [101.0], ("tf32",): [50.0], ("tf32", amp): [40.0],
              ("tf32", amp, RO): [20.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("amp", 5.0), _finding("tf32", 2.0),
                                                            _finding("torch-compile", 1.0)],
                              environment={"gpu_count": 1}, rules=[_finding("amp", 5.0), _finding("torch-compile", 1.0)],
                              idle={(amp,): 0.7, ("tf32",): 0.2, ("tf32", amp): 0.1}, lookahead=4)
    names = [c[0] for c in calls]
    assert names[:4] == ["00-baseline-repeat", "01-amp", "02-tf32", "03-amp"], names
    assert calls[3][:3] in calls[2][3], calls[2][3]


def test_the_process_after_next_is_guessed_on_the_path_where_both_are_kept(tmp_path):
    """A process's start-up (15-30 s on an H100 host) is longer than most trials run once
    started ahead (4-8 s): while a fix runs, the rung after next (this fix and the next both
    kept) is started too, and so is the batch size once the queue would be spent there."""
    speeds = {(): [100.0], ("set-to-none",): [50.0], ("set-to-none", "tf32"): [40.0],
              ("set-to-none", "tf32", RO): [20.0], ("set-to-none", "tf32", RO, "batch-size(factor=2)"): [35.0],
              ("set-to-none", "tf32", RO, "batch-size(factor=4)"): [70.0]}
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8}}}}
    findings = [_finding("set-to-none", 10.0), _finding("tf32", 5.0), _finding("torch-compile", 1.0),
                _finding("batch-size", 0.1)]
    result, calls, _ = ladder(tmp_path, speeds, findings, environment={"gpu_count": 1},
                              baseline=base, lookahead=5)
    names = [c[0] for c in calls]
    assert names[:4] == ["00-baseline-repeat", "01-set-to-none", "02-tf32", "03-torch-compile-reduce-overhead"], names
    assert calls[3][:3] in calls[1][3], calls[1][3]   # compile, two ahead, while set-to-none ran
    # and before the guesses past the two branches (compile's start-up is the longest)
    assert calls[1][3].index(calls[3][:3]) == 2, calls[1][3]
    assert ("apart-batch-size-x2", ("set-to-none", "tf32", RO, "batch-size(factor=2)"), True) in calls[2][3]


def test_batch_sizes_that_cannot_apply_say_why_and_are_not_guessed(tmp_path):
    """A script that samples its own batches (no DataLoader, as nanoGPT's get_batch): both
    batch-size factors are skipped with the reason, x4 not blamed on x2's speed, and no process
    is started ahead for either."""
    speeds = {(): [100.0], ("amp(dtype=bfloat16)",): [60.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("amp", 30.0), _finding("batch-size", 1.0)],
                              environment={"gpu_name": "NVIDIA H100", "bf16_supported": True}, lookahead=5)
    x2, x4 = _rec(result, "apart-batch-size-x2"), _rec(result, "apart-batch-size-x4")
    assert x2["status"] == x4["status"] == "skipped"
    assert x2["reason"] == x4["reason"] and "DataLoader" in x2["reason"]
    assert not any("batch-size" in key for _, _, _, guesses in calls for _, keys, _ in guesses for key in keys)


@pytest.mark.parametrize("queued,accumulates", [(False, False), (True, False), (False, True)])
def test_compile_is_guessed_while_amp_runs_when_nothing_else_is_left(tmp_path, queued, accumulates):
    """ADV109 names amp in its AFTER: faster kernels leave the launches exposed. On an H100 a
    nanoGPT-style fp32 step was 79% busy and the rules asked for compile only on AMP's trace,
    so compile's trial started from a spare (31.9 s). While AMP runs, compile is guessed as the
    ladder would run it next: when nothing else is queued (with other fixes still to try,
    compile goes last, and the next rung is the guess), in the mode that applies (default,
    where the step accumulates gradients)."""
    bf16 = {"gpu_count": 1, "gpu_name": "NVIDIA H100", "bf16_supported": True}
    speeds = {(): [100.0], ("amp(dtype=bfloat16)",): [60.0], ("amp(dtype=bfloat16)", RO): [30.0],
              ("amp(dtype=bfloat16)", "set-to-none"): [59.0], ("amp(dtype=bfloat16)", "set-to-none", RO): [30.0]}

    def rules(keys):
        return [_finding("torch-compile", 20.0)] if "amp(dtype=bfloat16)" in keys and RO not in keys else []

    speeds[("amp(dtype=bfloat16)", DEFAULT)] = [35.0]
    findings = [_finding("amp", 30.0)] + ([_finding("set-to-none", 1.0)] if queued else [])
    base = {**_timed(100.0), "config": {"gradient_accumulation": {"value": {"micro_batches": 4}}}} \
        if accumulates else None
    result, calls, _ = ladder(tmp_path, speeds, findings, environment=bf16, rules=rules, lookahead=5,
                              baseline=base)
    assert calls[1][0] == "01-amp"
    guessed = [g[:2] for g in calls[1][3]]
    mode = ("02-torch-compile-default", DEFAULT) if accumulates else ("02-torch-compile-reduce-overhead", RO)
    assert ((mode[0], ("amp(dtype=bfloat16)", mode[1])) in guessed) is not queued, guessed
    if not queued:
        assert calls[2][:3] in calls[1][3]


def test_cuda_graphs_are_skipped_for_a_step_that_accumulates_gradients(tmp_path):
    """CUDA graphs fail when a step accumulates gradients over several batches (the backward
    graph's output kept as a .grad is overwritten by the next micro-batch's replay:
    pytorch/pytorch#169545; a nanoGPT-style H100 trial failed in its first step, 31.9 s): the
    reduce-overhead rung is skipped with the reason and compile's default mode is tried."""
    base = {**_timed(100.0), "config": {"gradient_accumulation": {"value": {"micro_batches": 4}, "where": "t.py:9"}}}
    speeds = {(): [100.0], (DEFAULT,): [70.0]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("torch-compile", 30.0)],
                              environment={"gpu_count": 1}, baseline=base)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-torch-compile-default"]
    ro = next(t for t in result["trials"] if "reduce-overhead" in t["name"])
    assert ro["status"] == "skipped" and "169545" in ro["reason"] and "4 batches" in ro["reason"]
    assert _rec(result, "01-torch-compile-default")["status"] == "accepted"


@pytest.mark.parametrize("amp_kept", [True, False])
def test_a_safe_fix_on_a_stack_that_changed_numerics_is_held_to_that_tolerance(tmp_path, amp_kept):
    """Losses are compared with the baseline's: a safe fix on a stack holding AMP carries AMP's
    bf16 losses (on an H100 ImageFolder stack they are +28% over the fp32 baseline's first
    losses, past a safe fix's 10%): it is held to AMP's tolerance; on an fp32
    stack the same losses reject it."""
    bf16 = {"gpu_count": 1, "gpu_name": "NVIDIA H100", "bf16_supported": True}
    higher = {**_timed(50.0), "losses": [2.6, 2.45, 2.3, 2.2]}  # +28% over the baseline's first losses
    speeds = {(): [100.0], ("amp(dtype=bfloat16)",): {**_timed(70.0), "losses": [2.6, 2.45, 2.3, 2.2]},
              ("amp(dtype=bfloat16)", "cudnn-benchmark"): higher, ("cudnn-benchmark",): higher}
    findings = ([_finding("amp", 30.0)] if amp_kept else []) + [_finding("cudnn-benchmark", 50.0)]
    result, calls, _ = ladder(tmp_path, speeds, findings, environment=bf16)
    rec = next(t for t in result["trials"] if t["fix"] == "cudnn-benchmark")
    if amp_kept:
        assert _rec(result, "01-amp")["status"] == "accepted"
        assert rec["status"] == "accepted", rec["reason"]
    else:
        assert rec["status"] == "rejected" and rec["reason"].startswith("numerics"), rec["reason"]


def test_a_batch_size_on_a_compiled_stack_is_guessed_while_compile_is_next(tmp_path):
    """The batch sizes measured apart compile graphs of their own: guessed only once compile,
    the last rung, runs, they are measured 24-79 s after the ladder's end on an H100. While
    the rung before compile runs, the 2x batch on the stack with compile
    kept is guessed two ahead, before quick-starting guesses (a retry of the rejected tf32)."""
    amp = "amp(dtype=bfloat16)"
    base = {**_timed(100.0), "startup": {"cuda_init": 1.0, "first_step": 2.0},
            "config": {"dataloader": {"value": {"batch_size": 8}}}}
    speeds = collections.defaultdict(lambda: [79.5])  # whatever comes after: no faster
    speeds |= {(): [100.0], (amp,): [80.0], (amp, "tf32"): [80.5], (amp, "set-to-none"): [79.0],
              (amp, "set-to-none", RO): [30.0], (amp, "set-to-none", RO, "batch-size(factor=2)"): _timed(50.0, batch=16),
              (amp, "set-to-none", RO, "batch-size(factor=4)"): _timed(90.0, batch=32)}
    findings = [_finding("amp", 5.0), _finding("tf32", 3.0), _finding("torch-compile", 1.0),
                _finding("batch-size", 0.1), _finding("set-to-none", 0.05)]
    env = {"gpu_count": 1, "gpu_name": "NVIDIA H100", "bf16_supported": True}
    result, calls, _ = ladder(tmp_path, speeds, findings, environment=env, baseline=base, lookahead=4)
    assert [c[0] for c in calls][:5] == ["00-baseline-repeat", "01-amp", "02-tf32", "03-set-to-none",
                                         "04-torch-compile-reduce-overhead"], [c[0] for c in calls]
    names = [g[0] for g in calls[3][3]]
    assert names.index("apart-batch-size-x2") < names.index("04-tf32") < len(names), names
    assert calls[3][3][names.index("apart-batch-size-x2")][1] == (amp, "set-to-none", RO, "batch-size(factor=2)")


def test_the_data_free_ceiling_runs_after_the_ladder_on_the_kept_compute_fixes(tmp_path):
    """The ceiling: the kept stack without its data fixes, every batch one cached batch, timed
    only, recorded apart as a bound (never a fix, never in the stack the patch is made from)."""
    speeds = {(): [100.0], ("preload-dataset",): [50.0], ("preload-dataset", "set-to-none"): [40.0],
              ("set-to-none", "cached-batch"): [32.0]}
    findings = [_finding("preload-dataset", 50.0), _finding("set-to-none", 10.0)]
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8, "num_workers": 0}}}}
    result, calls, _ = ladder(tmp_path, speeds, findings, baseline=base, with_ceiling=True)
    name, keys, profiled, _ = calls[-1]
    assert (name, keys, profiled) == ("ceiling-data-free", ("set-to-none", "cached-batch"), False)
    rec = _rec(result, "ceiling-data-free")
    assert rec["status"] == "bound" and rec["apart"] and rec["ceiling"]
    assert rec["samples_per_s"] == pytest.approx(8 * 1000 / 32.0)
    assert [c["name"] for c in result["stack"]] == ["preload-dataset", "set-to-none"]   # the ceiling is not a fix
    # a script with no DataLoader: skipped, no process
    result, calls, _ = ladder(tmp_path, {(): [100.0], ("set-to-none",): [80.0]},
                              [_finding("set-to-none", 10.0)], with_ceiling=True)
    assert _rec(result, "ceiling-data-free")["status"] == "skipped" and calls[-1][0] != "ceiling-data-free"


def test_a_ceiling_slower_than_the_stack_it_should_bound_is_not_called_a_bound(tmp_path):
    """A cached-batch run slower than the kept stack (a loaded CPU host: 3,253 against 6,771
    samples/s) bounds nothing: it is recorded as measured, with why, and the roofline ignores it."""
    speeds = {(): [100.0], ("preload-dataset",): [20.0], ("cached-batch",): [40.0]}
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8, "num_workers": 0}}}}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("preload-dataset", 50.0)], baseline=base, with_ceiling=True)
    rec = _rec(result, "ceiling-data-free")
    assert rec["status"] == "measured" and "not a bound here: it ran 50% slower than the kept stack" in rec["reason"]
    assert "no data fix can make" not in rec["reason"]


def test_an_accepted_group_value_is_settled_before_other_fixes_run_on_top(tmp_path):
    """Worker counts compete as a group: the other count is tried right after the accepted
    one, and the next fix runs on the winner, not on the stack without it. (ADV118 asked for
    8 workers with a large gain, ADV103 for 4 or 8 with a small one, AMP sat between them: an
    H200 ladder trialled AMP and DALI without the 8 workers it had accepted, and lost them.)"""
    w4, w8 = "dataloader-workers(num_workers=4,pin_memory=False)", "dataloader-workers(num_workers=8,pin_memory=False)"
    speeds = {(): [100.0], (w4,): [60.0], (w8,): [50.0], (w8, "amp(dtype=bfloat16)"): [30.0]}
    many = {"code": "ADV118", "estimated_gain_ms": 50.0,
            "fix": {"intervention": "dataloader-workers", "params": {"num_workers": 8, "pin_memory": False}}}
    findings = [many, _finding("amp", 40.0), _finding("dataloader-workers", 10.0)]
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8, "num_workers": 0}}}}
    result, calls, _ = ladder(tmp_path, speeds, findings, environment={"cpu_count": 8}, baseline=base)
    names = [c[0] for c in calls]
    assert names[:3] == ["00-baseline-repeat", "01-dataloader-workers-8", "02-dataloader-workers-4"], names
    assert calls[3][1] == (w8, "amp(dtype=bfloat16)")   # AMP on the winner
    assert [s["name"] for s in result["stack"]] == ["dataloader-workers", "amp"]


def test_a_dali_trial_is_never_started_ahead(tmp_path, monkeypatch):
    """Guesses whose stack holds the dali fix are left to start fresh (a DALI pipeline started
    ahead stalled a step of its window 0.5-0.8 s on an H200); the others are started."""
    from advisor.trials import lookahead

    started = []

    class FakeHeld:
        def __init__(self, spec, *a, **k):
            self.spec, self.key = spec, lookahead.spec_key(spec)
            started.append(spec["run_name"])

        def alive(self):
            return True

        def warmed_up(self):
            return False

    monkeypatch.setattr(lookahead, "HeldChild", FakeHeld)
    monkeypatch.setattr(lookahead, "start_warm", lambda *a, **k: None)
    ahead = lookahead.Lookahead(tmp_path, 3, None, False)
    dali = {"run_name": "03-dali", "interventions": [{"name": "dataloader-workers"}, {"name": "dali"}]}
    amp = {"run_name": "03-amp", "interventions": [{"name": "dataloader-workers"}, {"name": "amp"}]}
    ahead.guess({"run_name": "02-dataloader-workers-8", "interventions": []}, [dali, amp])
    assert started == ["03-amp"]
    assert ahead.log[-1]["guesses"] == ["03-amp"]


# --- Ctrl-C ---------------------------------------------------------------------------------
# What run_child returns for a process Ctrl-C reached before it had measured (parent.py).
CUT = {"status": "incomplete", "interrupted": True, "incomplete_reasons": ["interrupted (Ctrl-C) at step 3"]}


def test_ctrl_c_while_the_reference_is_timed_again_keeps_the_trial_its_verdict_and_the_stack(tmp_path):
    """The lost +81.7%: a trial whose verdict could turn on a one-run reference has that
    reference timed again, and Ctrl-C there raised out of the verdict before the trial's record
    was written or its fix kept. Now the verdict stands on the runs it has."""
    speeds = {(): [101.0], ("set-to-none",): [60.0, CUT], ("set-to-none", "channels-last"): [57.0]}
    result, calls, _ = ladder(tmp_path, speeds,
                              [_finding("set-to-none", 10.0), _finding("channels-last", 5.0),
                               _finding("amp", 1.0)])
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-set-to-none", "02-channels-last",
                                     "02-channels-last-reference"]   # nothing after it
    assert result["interrupted"] is True
    kept = _rec(result, "02-")
    assert kept["status"] == "accepted" and kept["reference_runs"] == 1 and "+5.3%" in kept["reason"]
    assert [s["name"] for s in result["stack"]] == ["set-to-none", "channels-last"]
    assert not any(t["name"].startswith("03-") for t in result["trials"])


def test_ctrl_c_during_a_trial_records_it_as_not_run_and_keeps_a_groups_best_value(tmp_path):
    env = {"cpu_count": 8}
    w4, w8 = (c.key for c in expand({"intervention": "dataloader-workers"}, None, None, env))
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8, "num_workers": 0}}}}
    speeds = {(): [100.0], (w4,): [50.0], (w8,): [CUT]}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("dataloader-workers", 50.0),
                                                             _finding("set-to-none", 5.0)],
                              environment=env, baseline=base)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-dataloader-workers-4", "02-dataloader-workers-8"]
    assert _rec(result, "01-")["status"] == "accepted"
    cut = _rec(result, "02-")
    assert cut["status"] == "not run" and cut["reason"] == "interrupted (Ctrl-C) before it finished"
    # the group's best value so far was accepted and waited for its other values: it is kept
    assert result["stack"] == [{"name": "dataloader-workers", "params": {"num_workers": 4, "pin_memory": False}}]
    assert result["interrupted"] is True and result["threshold"] is not None


def test_ctrl_c_between_processes_starts_nothing_and_an_unsure_verdict_stays_unsure(tmp_path):
    """Ctrl-C noted between processes (advisor.commands.analyze.CtrlC): the trial that had run
    is judged on its runs; no confirmation round, no other trial, no ceiling starts."""
    pressed = []

    class Pressing(dict):  # Ctrl-C while trial 01 ran (its child had finished by then)
        def __getitem__(self, keys):
            if keys == ("set-to-none",):
                pressed.append(True)
            return super().__getitem__(keys)

    # repeat 110 ms against the baseline's 100: 10% noise; +11.6% is inside its band: unsure
    speeds = Pressing({(): [110.0], ("set-to-none",): [94.0]})
    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 10.0),
                                                             _finding("channels-last", 5.0)],
                              interrupted=lambda: bool(pressed), with_ceiling=True)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-set-to-none"]
    rec = _rec(result, "01-")
    assert rec["status"] == "unsure" and rec["reason"].endswith("not confirmed: interrupted (Ctrl-C)")
    assert result["stack"] == [] and result["interrupted"] is True
    assert not any(t["name"].startswith("ceiling") for t in result["trials"])


def test_a_run_ctrl_c_reached_after_it_had_measured_is_kept():
    from advisor.trials.process import finished

    done = {"stage": "measured", "exit": {"code": 0, "stopped_by_advisor": True}, "interrupted": True}
    assert finished(done)
    assert not finished({"stage": "timed", "exit": {"code": -2, "exception": "KeyboardInterrupt"}})


def test_the_ladder_stops_when_the_fixes_left_cannot_be_accepted(tmp_path):
    """Once the fixes still queued could not, by their estimates together, give the least gain a
    trial could be accepted on (3% of the 50 ms kept stack: 1.5 ms), none of them runs: each is
    recorded as not run, with why, and the kept stack stands."""
    speeds = {(): [100.0], ("set-to-none",): [50.0], ("set-to-none", "amp(dtype=bfloat16)"): [49.0]}
    findings = [_finding("set-to-none", 60.0), _finding("amp", 0.6)]
    result, calls, lines = ladder(tmp_path, speeds, findings, rules=[_finding("amp", 0.6), _finding("tf32", 0.5)])
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-set-to-none"]
    assert result["stack"] == [{"name": "set-to-none", "params": {}}]
    left = [t for t in result["trials"] if t["status"] == "not run"]
    assert {t["fix"] for t in left} == {"amp", "tf32"}
    assert all(t["reason"].startswith("stopped early: the 2 fixes left could give 1.10 ms") for t in left)
    assert "under the 1.50 ms" in result["stopped_early"] and any("stopped early" in line for line in lines)


@pytest.mark.parametrize("queued, runs", [
    (_finding("torch-compile", 0.5), True),    # fusion is not in compile's estimate: it runs
    ({"code": "ADV102", "fix": {"intervention": "channels-last"}}, True),   # no estimate: it runs
    (_finding("amp", 3.0), True),              # over the 1.5 ms a trial could be accepted on
    (_finding("amp", 0.6), False),
])
def test_a_fix_with_no_estimate_or_an_estimate_that_bounds_nothing_keeps_the_ladder_going(tmp_path, queued, runs):
    speeds = collections.defaultdict(lambda: [49.0], {(): [100.0], ("set-to-none",): [50.0]})
    result, calls, _ = ladder(tmp_path, speeds, [_finding("set-to-none", 60.0), queued], rules=[queued])
    assert any(c[0].startswith("02-") for c in calls) is runs, calls
    assert ("stopped_early" in result) is not runs


def test_under_fix_every_named_trial_runs_whatever_its_estimate(tmp_path):
    speeds = {(): [100.0], ("set-to-none",): [50.0], ("set-to-none", "amp(dtype=bfloat16)"): [49.0]}
    findings = [_finding("set-to-none", 60.0), _finding("amp", 0.1)]
    result, calls, _ = ladder(tmp_path, speeds, findings, rules=[_finding("amp", 0.1)], only={"set-to-none", "amp"})
    assert [c[0] for c in calls][:3] == ["00-baseline-repeat", "01-set-to-none", "02-amp"]
    assert "stopped_early" not in result


def test_the_data_free_ceiling_runs_before_a_second_data_fix_and_bounds_it(tmp_path):
    """Workers kept, the loop still waits (the rules ask for preloading): the data-free
    ceiling is timed first. At 48.5 ms against the workers' 50 ms, no data fix can give the 1.5
    ms a trial could be accepted on, so preloading is not run; the ceiling after the ladder is
    that same record, the compute fixes being unchanged."""
    w8 = "dataloader-workers(num_workers=8,pin_memory=False)"
    speeds = {(): [100.0], (w8,): [50.0], ("cached-batch",): [49.9]}
    workers = {"code": "ADV103", "estimated_gain_ms": 60.0,
               "fix": {"intervention": "dataloader-workers", "params": {"num_workers": 8, "pin_memory": False}}}
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8, "num_workers": 0}}}}
    result, calls, lines = ladder(tmp_path, speeds, [workers], baseline=base, with_ceiling=True,
                                  rules=[_finding("preload-dataset", 30.0)])
    names = [c[0] for c in calls]
    assert names == ["00-baseline-repeat", "01-dataloader-workers-8", "ceiling-data-free-01"], names
    assert calls[-1][1:3] == (("cached-batch",), False)   # the compute fixes (none) and the cached batch
    pre = next(t for t in result["trials"] if t["fix"] == "preload-dataset")
    assert pre["status"] == "skipped" and "at most" in pre["reason"]
    ceiling = [t for t in result["trials"] if t.get("ceiling")]
    assert [t["name"] for t in ceiling] == ["ceiling-data-free-01"] and result["ceiling"] is ceiling[0]
    assert any("timing the data-free ceiling first" in line for line in lines)


def test_the_early_ceiling_is_guessed_while_the_first_data_fix_runs(tmp_path):
    """A data fix whose kept branch leads to another data fix (preloading, which the rules ask
    for once workers are in): the ceiling timed before it is one of the guesses made while the
    first runs, and the ladder takes that run."""
    w8 = "dataloader-workers(num_workers=8,pin_memory=False)"
    speeds = {(): [100.0], (w8,): [50.0], ("cached-batch",): [49.9]}
    workers = {"code": "ADV103", "estimated_gain_ms": 60.0,
               "fix": {"intervention": "dataloader-workers", "params": {"num_workers": 8, "pin_memory": False}}}
    base = {**_timed(100.0), "startup": {"cuda_init": 1.0, "first_step": 2.0},
            "config": {"dataloader": {"value": {"batch_size": 8, "num_workers": 0}}}}
    _, calls, _ = ladder(tmp_path, speeds, [workers], baseline=base, with_ceiling=True,
                         rules=[_finding("preload-dataset", 30.0)], lookahead=3)
    assert [c[0] for c in calls] == ["00-baseline-repeat", "01-dataloader-workers-8", "ceiling-data-free-01"]
    assert ("ceiling-data-free-01", ("cached-batch",), False) in calls[1][3]


def test_a_ceiling_well_under_the_stack_lets_the_data_fix_run_and_a_changed_compute_stack_gets_its_own(tmp_path):
    """At 20 ms the ceiling leaves 30 ms for data fixes: preloading runs (and is kept); AMP then
    changes the compute fixes, so the ceiling after the ladder is a process of its own and the
    early one is a measurement, not the ceiling."""
    w8 = "dataloader-workers(num_workers=8,pin_memory=False)"
    amp = "amp(dtype=bfloat16)"
    speeds = {(): [100.0], (w8,): [50.0], ("cached-batch",): [20.0], (w8, "preload-dataset"): [25.0],
              (w8, "preload-dataset", amp): [15.0], (amp, "cached-batch"): [10.0]}
    workers = {"code": "ADV103", "estimated_gain_ms": 60.0,
               "fix": {"intervention": "dataloader-workers", "params": {"num_workers": 8, "pin_memory": False}}}
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8, "num_workers": 0}}}}

    def rules(keys):
        return [_finding("preload-dataset", 30.0), _finding("amp", 10.0)] if "preload-dataset" not in keys \
            else [_finding("amp", 10.0)]

    result, calls, _ = ladder(tmp_path, speeds, [workers], baseline=base, with_ceiling=True, rules=rules)
    names = [c[0] for c in calls]
    assert names == ["00-baseline-repeat", "01-dataloader-workers-8", "ceiling-data-free-01", "02-preload-dataset",
                     "03-amp", "ceiling-data-free"], names
    early_rec = _rec(result, "ceiling-data-free-01")
    assert early_rec["early"] and not early_rec["ceiling"]
    assert result["ceiling"]["name"] == "ceiling-data-free" and result["ceiling"]["ceiling"]


def test_ddp_goes_last_and_brings_no_retry(tmp_path):
    """Tune one GPU, then scale out: ddp waits behind every queued fix that does not go last
    (each trial after a kept ddp is a run over every GPU, one at a time, where the trials before
    it run side by side), and among those that do it comes in gain order, before torch.compile
    here. A fix rejected before is not tried again on ddp's stack, though its samples/s is much
    higher: each GPU's step is what it was."""
    ddp = "ddp(nproc=2)"
    speeds = {(): [100.0], ("tf32",): [99.0], ("channels-last",): [80.0],
              ("channels-last", ddp): [_timed(80.0, batch=16)], ("channels-last", ddp, RO): [_timed(70.0, batch=16)]}
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8}}}}
    result, calls, _ = ladder(tmp_path, speeds,
                              [_finding("ddp", 90.0), _finding("torch-compile", 50.0), _finding("tf32", 6.0),
                               _finding("channels-last", 5.0)],
                              environment={"gpu_count": 2}, baseline=base,
                              rules=[_finding("ddp", 90.0), _finding("tf32", 6.0)])
    names = [c[0] for c in calls]
    assert names[:5] == ["00-baseline-repeat", "01-tf32", "02-channels-last", "03-ddp",
                         "04-torch-compile-reduce-overhead"], names
    assert _rec(result, "01-")["status"] == "rejected" and _rec(result, "03-")["status"] == "accepted"
    assert not any("tf32" in n for n in names[3:]), names
    assert [c["name"] for c in result["stack"]] == ["channels-last", "ddp", "torch-compile"]


def test_a_short_budget_keeps_room_for_the_fix_that_scales_out(tmp_path, monkeypatch):
    """ddp goes last, and on several GPUs it is the largest gain: a fix before it starts only
    where ddp's process still fits after it. Each process takes 10 s; the budget's 95% ends 65 s
    after the start, 30 s gone at the repeat's end: tf32 fits with ddp's room (30 + 10 + 10 + 10),
    channels-last does not (40 + 30), ddp does (40 + 10 + 10). Without that room channels-last
    ran and ddp was not reached."""
    clock = [1000.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    ddp = "ddp(nproc=2)"
    speeds = {(): [_elapsed(100.0)], ("tf32",): [_elapsed(99.0)], ("channels-last",): [_elapsed(80.0)],
              (ddp,): [_elapsed(80.0, batch=16)], ("one-gpu",): [_elapsed(100.0)]}
    base = {**_elapsed(100.0), "config": {"dataloader": {"value": {"batch_size": 8}}}}
    result, calls, _ = ladder(tmp_path, speeds, [_finding("ddp", 90.0), _finding("tf32", 6.0), _finding("channels-last", 5.0)],
                              environment={"gpu_count": 2}, baseline=base, budget_s=65.0 / trials.planned_end(1.0),
                              clock=clock)
    names = [c[0] for c in calls]
    assert names[:3] == ["00-baseline-repeat", "01-tf32", "02-ddp"], names
    assert _rec(result, "channels-last")["status"] == "not run" and _rec(result, "02-ddp")["status"] == "accepted"


def _elapsed(ms: float, batch: int = 8) -> dict:
    return {**_timed(ms, batch=batch), "elapsed_s": 10.0}


def test_a_trial_whose_kept_fix_did_not_apply_is_not_judged_on_the_wrong_stack(tmp_path):
    """On an H100 a preload kept at +1250% refused in four later trials (a new estimate of its
    time over the limit): each was timed without it and rejected at -95%. A fix of the stack
    that applied in the reference's run and not in the trial's fails the trial, with why."""
    from advisor.runtime.patching import NOT_APPLIED

    amp = "amp(dtype=bfloat16)"
    lost = {**_timed(95.0), "notes": [f"{NOT_APPLIED} preload-dataset: computing every sample would take ~63 s"]}
    speeds = {(): [100.0], ("preload-dataset",): [10.0], ("preload-dataset", amp): lost}
    base = {**_timed(100.0), "config": {"dataloader": {"value": {"batch_size": 8}}}}
    result, _, _ = ladder(tmp_path, speeds, [_finding("preload-dataset", 80.0), _finding("amp", 5.0)],
                          environment={"gpu_count": 1}, baseline=base)
    rec = _rec(result, "02-")
    assert rec["status"] == "failed", rec
    assert rec["reason"] == "preload-dataset, kept before, did not apply in this run: computing every sample would take ~63 s"
    assert [c["name"] for c in result["stack"]] == ["preload-dataset"]
