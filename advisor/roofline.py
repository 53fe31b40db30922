"""Peak tensor throughput per GPU and dtype, and how much of it a run achieves (MFU).

Pure Python (no torch): the parent process and the report read it from child.json data.
All figures are *dense* TFLOP/s per GPU. NVIDIA datasheets print tensor-core figures "with
sparsity" (2:4 structured sparsity, which training never uses), so those are halved here;
the FP32 figure is the non-tensor-core CUDA-core peak, which datasheets give dense.
"""

from __future__ import annotations

import math
import numbers
import re

DTYPES = ("bf16", "fp16", "tf32", "fp32", "fp8")

_H100_SXM = {"bf16": 989.4, "fp16": 989.4, "tf32": 494.7, "fp32": 66.9, "fp8": 1978.9}
_H100_NVL = {"bf16": 835.5, "fp16": 835.5, "tf32": 417.5, "fp32": 60.0, "fp8": 1670.5}

# (pattern, peaks), searched in order on the lower-cased device name, so the most specific
# pattern comes first. Word boundaries keep "a10" off "a100"/"a10g", "l4" off "l40s" and
# "h200" off "gh200". Names as torch.cuda.get_device_name() / NVML give them, e.g.
# "NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", "Tesla V100-SXM2-16GB", "Tesla T4".
# A dtype missing from an entry has no tensor-core path on that GPU: peak_tflops gives None.
_PEAKS: list[tuple[str, dict[str, float]]] = [
    # H100 Tensor Core GPU datasheet (PCIe column)
    (r"\bh100\b.*\bpcie\b", {"bf16": 756.5, "fp16": 756.5, "tf32": 378.0, "fp32": 51.2, "fp8": 1513.0}),
    # H100 Tensor Core GPU datasheet (H100 NVL column)
    (r"\bh100\b.*\bnvl\b", _H100_NVL),
    # H100 Tensor Core GPU datasheet (SXM column); "NVIDIA H100 80GB HBM3" is the SXM part
    (r"\bh100\b", _H100_SXM),
    # GH200 Grace Hopper Superchip datasheet: its GPU has the H100 SXM tensor peaks
    (r"\bgh200\b", _H100_SXM),
    # H200 Tensor Core GPU datasheet (H200 NVL column, same as H100 NVL)
    (r"\bh200\b.*\bnvl\b", _H100_NVL),
    # H200 Tensor Core GPU datasheet (SXM column): more/faster HBM, same compute as H100 SXM
    (r"\bh200\b", _H100_SXM),
    # A100 Tensor Core GPU datasheet: SXM and PCIe, 40GB and 80GB share the tensor peaks
    (r"\ba100\b", {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5}),
    # A10 Tensor Core GPU datasheet. AWS's A10G is a different SKU without a public
    # datasheet: left out (the word boundary keeps it off this entry) rather than guessed.
    (r"\ba10\b", {"bf16": 125.0, "fp16": 125.0, "tf32": 62.5, "fp32": 31.2}),
    # L40S datasheet (362.05 dense BF16/FP16; its FP8 figure is left out as inconsistent)
    (r"\bl40s\b", {"bf16": 362.0, "fp16": 362.0, "tf32": 183.0, "fp32": 91.6}),
    # L4 Tensor Core GPU datasheet
    (r"\bl4\b", {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3, "fp8": 242.5}),
    # V100 datasheet (Volta: FP16 tensor cores only, no BF16/TF32). V100S PCIe column
    (r"\bv100s\b", {"fp16": 130.0, "fp32": 16.4}),
    # V100 datasheet, PCIe column
    (r"\bv100\b.*\bpcie\b", {"fp16": 112.0, "fp32": 14.0}),
    # V100 datasheet, SXM2 column (SXM3 and unknown variants fall here too)
    (r"\bv100\b", {"fp16": 125.0, "fp32": 15.7}),
    # T4 datasheet (Turing: FP16 mixed-precision tensor cores only)
    (r"\bt4\b", {"fp16": 65.0, "fp32": 8.1}),
]
# B200 and consumer GeForce/RTX cards are left out on purpose: B200's published per-GPU
# figures changed between announcements, and GeForce cards have no datasheet dense peaks
# for FP32-accumulate tensor math. Unknown GPUs give None, never a guess.


def gpu_peaks(gpu_name: str | None) -> dict[str, float] | None:
    """The dtype -> dense TFLOP/s table for a device name, or None when it is not known."""
    if not gpu_name:
        return None
    name = gpu_name.lower()
    for pattern, peaks in _PEAKS:
        if re.search(pattern, name):
            return peaks
    return None


def peak_tflops(gpu_name: str | None, dtype: str) -> float | None:
    """Dense peak TFLOP/s of one GPU for a compute dtype ("bf16", "fp16", "tf32", "fp32",
    "fp8"), or None for an unknown GPU or a dtype it has no (tensor-core) path for."""
    peaks = gpu_peaks(gpu_name)
    return None if peaks is None else peaks.get(dtype)


def _value(config: dict, key: str):
    # observer entries are {"value": ..., "where": ...}; tolerate a bare value too
    entry = config.get(key)
    return entry.get("value") if isinstance(entry, dict) and "value" in entry else entry


_HALF = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16"}


def compute_dtype(config: dict | None) -> str:
    """The dtype the run's matmuls/convolutions mostly use, from the observed config
    (child.json "config": see advisor/runner/observe.py)."""
    config = config or {}
    ac = _value(config, "autocast")
    # autocast on the accelerator decides: a CPU-only autocast leaves the GPU's math alone,
    # and autocast to float32 (nanoGPT's dtype='float32') changes no precision
    if isinstance(ac, dict) and ac.get("enabled") and ac.get("device_type") != "cpu" \
            and ac.get("dtype") in _HALF:
        return _HALF[ac["dtype"]]
    params = _value(config, "parameters")
    params = params if isinstance(params, dict) else {}
    if params.get("dtype") in _HALF:  # model.bfloat16() / .half() without autocast
        return _HALF[params["dtype"]]
    # Matmul TF32: allow_tf32 and float32_matmul_precision are one setting in torch
    # ("high" and "medium" both mean TF32 for cuBLAS); either one saying so is enough.
    if _value(config, "tf32.matmul") is True or \
            _value(config, "float32_matmul_precision") in ("high", "medium"):
        return "tf32"
    # Convolution TF32 (cudnn.allow_tf32) defaults to True, so an fp32 CNN already runs its
    # convolutions, where its FLOPs are, on TF32 tensor cores: judging it against the FP32
    # peak would give MFU far above 100%. A model with 2d/3d convolutions
    # (parameters.conv_memory_format set) is therefore taken as TF32 when cuDNN TF32 is on.
    # A model mixing one conv with fp32 matmuls (a ViT's patch embedding) is then judged
    # against the higher peak: its MFU is understated rather than impossible.
    if params.get("conv_memory_format") is not None and _value(config, "tf32.cudnn") is True:
        return "tf32"
    return "fp32"


def _result(flops_per_step, achieved, gpu_name, dtype) -> dict:
    peak = peak_tflops(gpu_name, dtype)
    if peak is None and dtype == "tf32":
        # TF32 flags are no-ops before Ampere (V100, T4): the math runs in plain FP32
        fp32 = peak_tflops(gpu_name, "fp32")
        if fp32 is not None:
            peak, dtype = fp32, "fp32"
    mfu = achieved / peak if achieved is not None and peak else None
    return {"flops_per_step": flops_per_step, "achieved_tflops": achieved,
            "peak_tflops": peak, "dtype": dtype, "mfu": mfu}


def _positive(x) -> bool:
    # numbers.Real so numpy scalars from the measurements count; NaN/inf/<=0 mean unknown
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def utilization(flops_per_step: float | None, step_ms: float | None,
                gpu_name: str | None, dtype: str) -> dict:
    """Achieved TFLOP/s and MFU of one GPU from the FLOPs one step does on it and the step
    time. Keys: flops_per_step, achieved_tflops, peak_tflops, dtype, mfu (None where unknown).
    With data parallelism pass one GPU's FLOPs: the peak is per GPU."""
    achieved = None
    if _positive(flops_per_step) and _positive(step_ms):
        achieved = flops_per_step / (step_ms / 1e3) / 1e12
    return _result(flops_per_step if _positive(flops_per_step) else None, achieved, gpu_name, dtype)


def for_rate(flops_per_sample: float | None, samples_per_s: float | None,
             gpu_name: str | None, dtype: str) -> dict:
    """utilization() from a per-sample FLOP count and a samples/s rate (one GPU's rate);
    flops_per_step is None and flops_per_sample is added."""
    achieved = None
    if _positive(flops_per_sample) and _positive(samples_per_s):
        achieved = flops_per_sample * samples_per_s / 1e12
    out = _result(None, achieved, gpu_name, dtype)
    out["flops_per_sample"] = flops_per_sample if _positive(flops_per_sample) else None
    return out


def on_yardstick(row: dict, yard_peak: float | None) -> dict:
    """One row with its MFU against one yardstick, the GPU's best dense training peak (bf16 /
    fp16 Tensor Cores): a baseline in fp32 and a stack in bf16 then read on the same scale (each
    against its own dtype's peak, an fp32 baseline could show 48% and the faster bf16 stack 7%).
    The dtype's own MFU stays beside it (``dtype_mfu``); with no bf16 peak known (a V100) the
    dtype's is the yardstick."""
    out = dict(row)
    out["dtype_mfu"] = row.get("mfu")
    achieved = row.get("achieved_tflops")
    if yard_peak:
        out["yardstick_tflops"] = yard_peak
        out["mfu"] = achieved / yard_peak if achieved is not None else None
    return out


def _num(v: float) -> str:
    # three significant figures, but never scientific notation for big peaks (1979)
    return f"{v:.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.3g}"


def describe(util: dict) -> str:
    """One line, e.g. "312 TFLOP/s achieved of 989 bf16 peak (MFU 31.5%)"."""
    achieved, peak, dtype = util.get("achieved_tflops"), util.get("peak_tflops"), util.get("dtype")
    if achieved is None:
        tail = f"; {_num(peak)} {dtype} peak" if peak else ""
        return f"achieved TFLOP/s unknown (no FLOP count or step time{tail})"
    if not peak:
        return f"{_num(achieved)} TFLOP/s achieved (no peak known for this GPU)"
    yard = util.get("yardstick_tflops")
    if yard and dtype not in ("bf16", "fp16") and util.get("mfu") is not None:
        own = util.get("dtype_mfu")
        own_text = f"; {own * 100:.1f}% of the {_num(peak)} {dtype} peak" if own is not None else ""
        return f"{_num(achieved)} TFLOP/s achieved in {dtype} (MFU {util['mfu'] * 100:.1f}% of the {_num(yard)} " \
               f"bf16 peak{own_text})"
    mfu = util.get("mfu")
    mfu = achieved / peak if mfu is None else mfu
    return f"{_num(achieved)} TFLOP/s achieved of {_num(peak)} {dtype} peak (MFU {mfu * 100:.1f}%)"
