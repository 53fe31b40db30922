"""The profiler's overhead: a profiled step against the measured (unprofiled) one.

advisor times unprofiled steps (run.json `measurement.step_time_ms`) and profiles a few others
(`analysis.step_time_ms`, split by phase in `analysis.breakdown`). The profiler slows a step,
on a CPU several times over, so the terminal and the report show the phases scaled to the
measured step: each phase × measured / profiled, which keeps the profiled step's shares and sums
to the measured step. Where nothing was measured (`advisor inspect` reads a trace alone) the
breakdown stays as profiled and nothing is said of overhead.

Pure functions; every input is optional and a missing or non-finite number counts as absent.
"""

from __future__ import annotations

import math

SMALL = 0.10  # |profiled / measured - 1| below this: the two agree, the profiler added little
SCALED_NOTE = "ms are scaled to the measured step, shares are the profiled step's"


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) else None


def fmt_ms(v: float) -> str:
    """A step time to three figures or so: 647, 70.1, 8.91, 0.512."""
    a = abs(v)
    return f"{v:,.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 1 else f"{v:.3f}"


def scale_breakdown(breakdown, profiled_ms, measured_ms) -> dict | None:
    """Each phase × measured / profiled (phases that are not numbers stay None); None when
    there is no breakdown, and the breakdown unscaled when either step time is missing."""
    if not isinstance(breakdown, dict) or not breakdown:
        return None
    p, m = _num(profiled_ms), _num(measured_ms)
    k = m / p if p and p > 0 and m and m > 0 else 1.0
    return {key: (None if _num(v) is None else _num(v) * k) for key, v in breakdown.items()}


def overhead_sentence(profiled_ms: float, measured_ms: float) -> str:
    """What the profiled step says against the measured one, in words (plain text)."""
    f = profiled_ms / measured_ms
    head = f"profiled step {fmt_ms(profiled_ms)} ms, measured {fmt_ms(measured_ms)} ms unprofiled: "
    if f < 1 - SMALL:
        body = (f"the profiled steps ran {1 / f:.1f}x faster than the timed ones (e.g. steps profiled "
                f"after an epoch boundary), so this is not profiler overhead")
    elif f - 1 < SMALL:
        body = f"the two agree within 10% ({f:.2f}x), so the profiler added little"
    else:
        body = f"the profiler made steps {f:.1f}x slower"
    return f"{head}{body}; {SCALED_NOTE}."


def profiler_overhead(analysis: dict | None = None, measurement: dict | None = None) -> dict:
    """The profiled step against the measured one:

    profiled_ms  the profiled step (analysis.step_time_ms, else the breakdown's sum), or None
    measured_ms  the measured unprofiled step (measurement.step_time_ms), or None
    factor       profiled / measured, or None when either is missing
    kind         "unmeasured" (no factor), "slower" (factor >= 1.1), "small" (within 10%) or
                 "faster" (factor < 0.9: the profiled steps were not the timed ones' like)
    scaled       whether `breakdown` is scaled to the measured step
    breakdown    the phases in ms: scaled to the measured step, or as profiled when unmeasured
    profiled_breakdown  the phases as profiled
    step_ms      what `breakdown` sums to: measured_ms when scaled, else profiled_ms
    sentence     the overhead in words (overhead_sentence), None when unmeasured
    """
    analysis = analysis if isinstance(analysis, dict) else {}
    measurement = measurement if isinstance(measurement, dict) else {}
    raw = analysis.get("breakdown") if isinstance(analysis.get("breakdown"), dict) and analysis.get("breakdown") else None
    profiled = _num(analysis.get("step_time_ms"))
    if profiled is None and raw:
        vals = [_num(v) for v in raw.values()]
        profiled = sum(v for v in vals if v is not None) if any(v is not None for v in vals) else None
    measured = _num(measurement.get("step_time_ms"))
    ok = profiled is not None and profiled > 0 and measured is not None and measured > 0
    factor = profiled / measured if ok else None
    kind = ("unmeasured" if factor is None else "faster" if factor < 1 - SMALL
            else "small" if abs(factor - 1) < SMALL else "slower")
    return {"profiled_ms": profiled, "measured_ms": measured if measured and measured > 0 else None,
            "factor": factor, "kind": kind, "scaled": ok and raw is not None,
            "breakdown": scale_breakdown(raw, profiled, measured) if ok else (dict(raw) if raw else None),
            "profiled_breakdown": dict(raw) if raw else None,
            "step_ms": measured if ok else profiled,
            "sentence": overhead_sentence(profiled, measured) if ok else None}


def of_doc(doc: dict | None) -> dict:
    """profiler_overhead of a run document (run.json) or an `inspect` result (no measurement)."""
    doc = doc if isinstance(doc, dict) else {}
    return profiler_overhead(doc.get("analysis"), doc.get("measurement"))


def of_trial(t: dict | None) -> dict:
    """profiler_overhead of one trial record of run.json `trials[]`: its own breakdown,
    profiled_step_time_ms and (measured) step_time_ms."""
    t = t if isinstance(t, dict) else {}
    return profiler_overhead({"breakdown": t.get("breakdown"), "step_time_ms": t.get("profiled_step_time_ms")},
                             {"step_time_ms": t.get("step_time_ms")})
