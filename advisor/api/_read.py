"""Tolerant readers of run.json values (a missing or mistyped key is absent, never an error), and
the tables' shared code (pandas imported only when a table is asked for)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

PathLike = str | os.PathLike

BREAKDOWN_COLUMNS = ("phase", "ms_profiled", "ms_scaled", "share")
FINDING_COLUMNS = ("code", "name", "severity", "message", "est_gain_ms", "fix_intervention", "fix_where")
TRIAL_COLUMNS = ("name", "fix", "status", "samples_per_s", "step_time_ms", "speedup_vs_baseline",
                 "gain_vs_previous", "batch_size", "apart", "ceiling", "reason")
KERNEL_COLUMNS = ("kernel_class", "share", "ms_per_step")


# --- tolerant readers: a missing or mistyped key is absent, never an error ---------------------

def _dict(v: Any) -> dict:
    return dict(v) if isinstance(v, Mapping) else {}


def _list(v: Any) -> list:
    return list(v) if isinstance(v, (list, tuple)) else []


def _float(v: Any) -> float | None:
    # bool is an int to Python but never a measurement; numpy scalars pass through float()
    if isinstance(v, bool) or v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _int(v: Any) -> int | None:
    f = _float(v)
    return int(f) if f is not None and f == int(f) else None


def _str(v: Any) -> str | None:
    return v if isinstance(v, str) else None


def _numbers(v: Any) -> dict[str, float | None] | None:
    """A {name: number} mapping with its values as floats (None where not a number); None when empty."""
    if not isinstance(v, Mapping) or not v:
        return None
    return {str(k): _float(x) for k, x in v.items()}


def _pandas():
    try:
        import pandas
    except ImportError:
        raise ImportError("this needs pandas: pip install pandas") from None
    return pandas


# columns that hold numbers: float, absent values NaN (a column of None alone would be object dtype)
NUMERIC = {"ms_profiled", "ms_scaled", "share", "ms_per_step", "est_gain_ms", "samples_per_s", "step_time_ms",
           "speedup_vs_baseline", "gain_vs_previous"}


def _frame(rows: list[dict], columns: Sequence[str]):
    df = _pandas().DataFrame(rows, columns=list(columns))
    for c in columns:
        if c in NUMERIC:
            df[c] = df[c].astype(float)
    return df


def _breakdown_rows(profiled: dict | None, scaled: dict | None) -> list[dict]:
    """One row a phase; the share is of the profiled step (scaling keeps the shares)."""
    if not profiled:
        return []
    total = sum(v for v in profiled.values() if v is not None)
    scaled = scaled or {}
    return [{"phase": phase, "ms_profiled": ms, "ms_scaled": scaled.get(phase),
             "share": ms / total if ms is not None and total > 0 else None}
            for phase, ms in profiled.items()]


def _kernel_rows(shares: dict | None, ms: dict | None) -> list[dict]:
    shares, ms = shares or {}, ms or {}
    return [{"kernel_class": c, "share": shares.get(c), "ms_per_step": ms.get(c)} for c in {**shares, **ms}]


def _one_of(value: str | Iterable[str] | None) -> set[str] | None:
    if value is None:
        return None
    return {value} if isinstance(value, str) else set(value)


