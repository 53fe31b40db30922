"""Noise-aware comparison of runs, and the numerics guard for trials."""

from __future__ import annotations

import math
import statistics

MIN_GAIN = 0.03  # the floor: never accept a gain under 3%


def step_times(child: dict) -> list[float]:
    """The timed (unprofiled) step times of a child result, gaps left out."""
    return [t for t in child.get("step_times_ms") or [] if t is not None and t > 0]


def median_step_ms(child: dict) -> float | None:
    times = step_times(child)
    return statistics.median(times) if times else None


def samples_per_s(child: dict) -> float | None:
    med = median_step_ms(child)
    batch = child.get("batch_size")
    return batch * 1000.0 / med if med and batch else None


def run_noise(a: dict, b: dict) -> float:
    """Relative run-to-run noise from two runs of the same configuration.

    The difference of the two medians, and each run's own spread of medians (IQR/median
    scaled down by sqrt(n), as a median's standard error), whichever is larger.
    """
    ma, mb = median_step_ms(a), median_step_ms(b)
    if not ma or not mb:
        return 0.0
    between = abs(ma - mb) / min(ma, mb)
    within = 0.0
    for run, med in ((a, ma), (b, mb)):
        times = step_times(run)
        if len(times) >= 4:
            q = statistics.quantiles(times, n=4)
            within = max(within, (q[2] - q[0]) / med / math.sqrt(len(times)))
    return max(between, within)


def acceptance_threshold(noise: float) -> float:
    return max(MIN_GAIN, 2.0 * noise)


def throughput_gain(trial: dict, reference: dict) -> float | None:
    """Relative samples/s gain of trial over reference (batch-size aware); None if unknown."""
    st, sr = samples_per_s(trial), samples_per_s(reference)
    if st and sr:
        return st / sr - 1.0
    mt, mr = median_step_ms(trial), median_step_ms(reference)
    if mt and mr:
        return mr / mt - 1.0
    return None


def numerics_verdict(trial_losses: list, base_losses: list, changes_numerics: bool) -> str | None:
    """None when training looks healthy, else a one-line reason to reject.

    Same seeds in both runs, so the first losses should track the baseline: a safe fix
    within 10% (reduction order, worker RNG), a numerics-changing one (AMP, TF32, batch)
    within 35%, over the mean of the steps both runs saw. NaN/inf always rejects, and so
    does a loss that ends far above where it started (divergence).
    """
    t = [float(x) for x in trial_losses if x is not None]
    if not t:
        return None  # no loss observed (no backward on a tensor): nothing to compare
    bad = [i for i, x in enumerate(t) if not math.isfinite(x)]
    if bad:
        return f"loss became {t[bad[0]]} at step {bad[0] + 1}"
    b = [float(x) for x in base_losses if x is not None and math.isfinite(float(x))]
    n = min(len(t), len(b))
    if n >= 3:
        mt, mb = statistics.fmean(t[:n]), statistics.fmean(b[:n])
        tol = 0.35 if changes_numerics else 0.10
        if abs(mt - mb) > tol * max(abs(mb), 1e-6) and mt > mb:
            return f"mean loss over the first {n} steps {mt:.4g} vs baseline {mb:.4g} (tolerance {tol:.0%})"
    k = max(1, len(t) // 4)
    start, end = statistics.fmean(t[:k]), statistics.fmean(t[-k:])
    if len(t) >= 8 and end > 2.0 * max(start, 1e-6) and (not b or end > 2.0 * max(statistics.fmean(b[-k:]), 1e-6)):
        return f"loss diverged: {start:.4g} → {end:.4g}"
    return None
