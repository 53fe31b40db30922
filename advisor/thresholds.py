"""Rule thresholds, each with the reason it was chosen (what was measured when it was set:
docs/measurement.md, and tests/fixtures/traces/README.md for the fixtures'). Override with
``--threshold NAME=VALUE`` (or ``ADVISOR_THRESHOLDS="a=1,b=2"``)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, fields


@dataclass
class Thresholds:
    # The PyTorch Profiler TensorBoard plugin flagged DataLoader time above 5% of the step;
    # XProf calls >=20% input time "highly input-bound". Warn at 5%, error at 20%.
    data_wait_frac: float = 0.05
    data_wait_frac_error: float = 0.20
    # Non-Tensor-Core matmul/conv above 10% of kernel time: fp32 conv-net training spends most
    # of it there, AMP runs next to none; 10% leaves room for small fp32 heads/losses.
    non_tc_gemm_frac: float = 0.10
    # TF32 matmul/conv above 15% of kernel time with autocast off: bf16 runs them at twice the
    # rate, so at least ~7% of GPU time is at stake, over the 3% trial floor. An fp32 conv net
    # on cuDNN's default TF32 spends more than that there; AMP runs next to none.
    tf32_gemm_frac: float = 0.15
    # NCHW<->NHWC transposes: a large share of an NCHW conv net's kernel time on Tensor Cores,
    # none with channels_last. 3% is well above rounding noise of stray transposes.
    transpose_frac: float = 0.03
    # Host-to-device copies from pageable memory: any pageable copy above 1 MB per step is
    # worth pinning (pageable copies of that size run at a fraction of the pinned bandwidth).
    pageable_h2d_bytes: float = 1 << 20
    # Fills under zero_grad: a visible share of a ResNet's kernel time; 0.5% is measurable.
    zero_grad_fill_frac: float = 0.005
    # Unfused optimizer: foreach/fused launch O(1) kernels per op; above this many kernels per
    # step inside optimizer.step the per-parameter loop is in use.
    optimizer_kernels_per_step: int = 40
    optimizer_frac: float = 0.02
    # nsys analyze flags GPU utilization under 50%; info from 80% (launch gaps worth a look).
    gpu_busy_pct_warn: float = 50.0
    gpu_busy_pct_info: float = 80.0
    # Kernels shorter than this are launch-overhead dominated on Hopper (~5 us launch cost).
    short_kernel_us: float = 20.0
    # Host-device syncs per step above this are flagged (one per step for logging is common).
    syncs_per_step: float = 1.0
    # Memory: below this fraction of capacity at peak, a larger batch fits; above the upper
    # one an OOM is near (allocator fragmentation needs headroom).
    memory_low_frac: float = 0.35
    memory_high_frac: float = 0.90
    # Communication not overlapped with compute above this fraction of step time.
    exposed_comm_frac: float = 0.10
    # Straggler: the other ranks' time in collectives exceeds the least-waiting rank's by this
    # fraction of the step (ADV116; collectives align step times, so waits, not step times,
    # differ). Unchanged at 0.10: recorded stragglers lie far above it and balanced ranks
    # mostly below, where a scheduler hiccup in one step can read as a straggler
    # (tests/fixtures/traces/README.md, "Noise").
    straggler_frac: float = 0.10
    # H2D bytes per sample above this with float32 images suggest copying uint8 (4x fewer bytes).
    float_input_h2d_frac: float = 0.02
    # Python's collections on the training thread above 2% of the timed window (ADV120): under
    # the trials' 3% floor alone, but gc-freeze rides in a bundled rung with the other cheap
    # fixes. The runs it was set against: docs/measurement.md, "Garbage-collector pauses".
    gc_frac: float = 0.02
    # Padding above a quarter of the timed steps' tokens (ADV122): every layer computes the pad
    # positions as it does the real ones, so the step spends up to that share on nothing
    # (the runs it was set against: docs/measurement.md, "Tokens and padding").
    padding_frac: float = 0.25
    # torch.compile graphs made inside the timed window (ADV123): one may be a last shape the
    # warm-up did not meet; two or more are shapes that keep changing (the runs it was set
    # against: docs/measurement.md, "Recompiles").
    window_compiles: int = 2

    @classmethod
    def from_environment(cls, overrides: list[str] | None = None, environ=os.environ) -> Thresholds:
        """The command line's thresholds: ADVISOR_THRESHOLDS first, then --threshold items."""
        env = environ.get("ADVISOR_THRESHOLDS")
        return cls.from_overrides([*(env.split(",") if env else []), *(overrides or [])])

    @classmethod
    def from_overrides(cls, overrides: list[str] | None = None) -> Thresholds:
        """The defaults with NAME=VALUE items applied; ValueError names an unknown one."""
        t = cls()
        items = list(overrides or [])
        names = {f.name: f.type for f in fields(cls)}
        for item in items:
            key, sep, val = item.partition("=")
            key = key.strip().replace("-", "_")
            if not sep or key not in names:
                raise ValueError(f"unknown threshold {item!r}; known: {', '.join(sorted(names))}")
            try:
                value = float(val)
            except ValueError:
                raise ValueError(f"threshold {key}: {val.strip()!r} is not a number") from None
            if not math.isfinite(value):
                raise ValueError(f"threshold {key}: {val.strip()!r} is not a finite number")
            setattr(t, key, type(getattr(t, key))(value))
        return t
