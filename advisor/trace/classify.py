"""Kernel classification: a GPU kernel name -> one of CLASSES.

Rules are an ordered list of (predicate, class) pairs over the lower-cased name; the first
match wins, so each rule may assume the earlier ones did not match. Every rule carries the
reason it exists. Names come from real traces (see /work/shared/gpu-facts.md and the GPU
fixtures in tests/fixtures/traces); re-check them when CUDA/cuDNN/cuBLAS versions change.

The class here is name-based only. Work whose class depends on *when* it ran (an
elementwise kernel launched inside ``Optimizer.step``) is re-labelled by
``advisor.metrics`` which knows the phases.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache, lru_cache

CLASSES: tuple[str, ...] = (
    "tc_gemm_conv",      # matmul/conv on Tensor Cores
    "gemm_conv",         # matmul/conv on CUDA cores (fp32 SIMT, gemv, fft/winograd helpers)
    "layout_transpose",  # cuDNN NCHW<->NHWC conversions around convs
    "elementwise",
    "normalization",     # batch/layer/group/rms norm and softmax
    "reduction",
    "optimizer",
    "fill_memset",
    "memcpy",
    "communication",
    "attention",
    "other",
)
CODE: dict[str, int] = {c: i for i, c in enumerate(CLASSES)}

# --- GEMM / conv detection -------------------------------------------------------------

# Anything that is a matrix multiply or convolution, whatever unit it runs on.
# `conv(?!ert)`: "convert" kernels are copies, not convolutions.
_GEMM_CONV = re.compile(
    r"gemm|gemv|conv(?!ert)|xmma|cutlass|nvjet|gmma|hmma|imma|wmma|dgrad|wgrad|fprop"
    r"|winograd|im2col|col2im|fft|cublas|matmul|splitkreduce|scudnn|dot_kernel|scal_kernel"
)

# GEMM/conv kernels that never run on Tensor Cores, whatever their operand dtype says. Checked
# before the dtype markers: implicit_convolve_sgemm<__half> and the cuDNN "engine" families are
# FFMA code paths that predate Tensor Cores; split-K reductions, workspace init, epilogues and
# beta-scaling are CUDA-core bookkeeping around a GEMM.
_NEVER_TC = re.compile(
    r"sgemm|scudnn|simt|ffma|gemv|gemmsn|dot_kernel|_engine<|engine_float|alg0|alg1|winograd"
    r"|fft|im2col|col2im|splitkreduce|reducesplitk|reduce_wgrad|init_device_workspace"
    r"|epilogue::impl|scal_kernel"
)

# cuDNN/cuBLAS xmma names carry "<A><B>_<math><acc>_<C>": the second token's first type is the
# math type. f32f32_f32f32_f32 is FFMA (gpu-facts: NOT Tensor Core); f32f32_tf32f32_f32 (sm90)
# and tf32f32_tf32f32_f32 (sm80) are TF32; bf16bf16_bf16f32 and f16f16_f16f32 are Tensor Core.
_T = r"tf32|bf16|f16|f32|f64|e4m3|e5m2|fp8|i8|s8|i32"
_XMMA_TYPES = re.compile(rf"_((?:{_T})+)_((?:{_T})+)_")
_XMMA_MATH = re.compile(_T)

# Tensor Core evidence: engines (tensorop, wmma, hmma, imma, gmma/wgmma, nvjet), instruction
# shapes (s1688gemm, s16816gemm, s884gemm, s16816dgrad, tensor16x8x16) and reduced-precision
# operand types (tf32, bf16, half).
_TC_MARKERS = re.compile(
    r"tensorop|wmma|hmma|imma|gmma|nvjet|tensor\d+x\d+x\d+|[shib]\d{3,6}(?:gemm|dgrad|fprop|wgrad)"
    r"|tf32|tfloat32|bf16|bfloat16|half|f16|fp16|fp8|e4m3|e5m2"
)


def _is_tensor_core(n: str) -> bool:
    """Ordered tests for a name already known to be a GEMM/conv (lower-cased, no params)."""
    if _NEVER_TC.search(n):
        return False
    if "xmma" in n:
        m = _XMMA_TYPES.search(n)
        if m:
            return _XMMA_MATH.match(m.group(2)).group(0) not in ("f32", "f64")
    # Anything else needs positive evidence; an unknown fp32 GEMM stays off Tensor Cores.
    return bool(_TC_MARKERS.search(n))


def base_name(name: str) -> str:
    """The kernel name without its trailing parameter list, lower-cased.

    Demangled names end in "(int, float const*, cudnn::reduced_divisor, ...)": words there
    ("reduce", "float") would trigger the wrong rules. Template arguments are kept (FillFunctor,
    dtypes live there)."""
    n = name.replace("(anonymous namespace)", "anon")
    depth = 0
    for i, ch in enumerate(n):
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth = max(0, depth - 1)
        elif ch == "(" and depth == 0 and i > 0:
            n = n[:i]
            break
    return n.lower()


# --- the ordered rule list --------------------------------------------------------------

Rule = tuple[Callable[[str], bool], str, str]


def _has(*subs: str) -> Callable[[str], bool]:
    return lambda n: any(s in n for s in subs)


RULES: list[Rule] = [
    (_has("nccl"), "communication",
     "NCCL collectives (ncclKernel_*/ncclDevKernel_*) are communication, whatever they reduce."),
    (_has("nchwtonhwc", "nhwctonchw", "nchw2nhwc", "nhwc2nchw"), "layout_transpose",
     "cuDNN's layout conversions around NCHW convs; they vanish with channels_last."),
    (_has("flash", "fmha", "efficient_attention", "attention", "sdpa"), "attention",
     "Fused attention kernels contain GEMMs but are tuned as one unit; before the GEMM rules."),
    (_has("fillfunctor", "fill_kernel", "zerofunctor", "memset"), "fill_memset",
     "zero_grad(set_to_none=False) launches FillFunctor elementwise kernels (gpu-facts); "
     "_foreach_zero_ uses ZeroFunctor inside multi_tensor_apply; both are fills."),
    (_has("multi_tensor_apply", "fused_adam", "fusedadam", "fused_sgd", "fusedsgd", "adam_",
          "_adamw", "lamb_", "fused_optimizer", "sgdmath"), "optimizer",
     "foreach/fused optimizers run multi_tensor_apply_kernel or fused Adam/SGD kernels."),
    (lambda n: bool(_GEMM_CONV.search(n)) and _is_tensor_core(n), "tc_gemm_conv",
     "Tensor Core GEMM/conv: decided by _is_tensor_core's ordered dtype/engine tests."),
    (lambda n: bool(_GEMM_CONV.search(n)), "gemm_conv",
     "Every other GEMM/conv (fp32 SIMT, gemv, split-K reduce, im2col, winograd, fft)."),
    (_has("batch_norm", "batchnorm", "bn_fw", "bn_bw", "cudnn::bn_", "layer_norm", "layernorm",
          "group_norm", "groupnorm", "rms_norm", "rmsnorm", "instance_norm", "welford",
          "softmax"), "normalization",
     "Norm layers; softmax is grouped here on purpose: like layer_norm it is a row-wise "
     "reduce-then-scale that fuses with its neighbours, not a standalone reduction."),
    (_has("reduce_kernel", "reduce", "triton_red_", "triton_per_", "argmax", "argmin",
          "nll_loss", "cub::", "scan_kernel", "radixsort"), "reduction",
     "Tensor reductions (sum/mean/max/norm), loss reductions, CUB scans/sorts."),
    (_has("elementwise", "triton_poi_", "copy_kernel", "cat_", "catarray", "index_", "indexing",
          "scatter", "gather", "where_kernel", "clamp", "pointwise", "activation", "relu",
          "gelu", "silu", "sigmoid", "tanh", "dropout", "fused_", "padding", "scalepackedtensor"),
     "elementwise",
     "Pointwise kernels: TensorIterator elementwise_kernel variants, copies, Triton pointwise, "
     "cuDNN's pad/scale helpers (nhwcAddPaddingKernel, scalePackedTensor_kernel)."),
]


@cache
def classify(name: str) -> str:
    """Class of one kernel name (see CLASSES)."""
    n = base_name(name)
    for pred, cls, _why in RULES:
        if pred(n):
            return cls
    return "other"


def classify_code(name: str) -> int:
    return CODE[classify(name)]


# TF32: Tensor Cores fed fp32 storage rounded to a 10-bit mantissa. xmma names carry the
# math type (f32f32_tf32f32_f32 on sm90, tf32f32_tf32f32_f32 on sm80); CUTLASS's sm80 TF32
# instruction shape is s1688 (gpu-facts). bf16/fp16 Tensor Core math runs at twice its rate.
_TF32 = re.compile(r"tf32|tfloat32|s1688(?:gemm|fprop|dgrad|wgrad)")


@lru_cache(maxsize=4096)
def is_tf32(name: str) -> bool:
    """A Tensor Core matmul/conv whose math is TF32 (fp32 training with TF32 allowed)."""
    return classify(name) == "tc_gemm_conv" and bool(_TF32.search(name.lower()))
