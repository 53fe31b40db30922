"""advisor.roofline: GPU peak table, compute dtype from the observed config, MFU arithmetic."""

import math

import pytest

from advisor import roofline
from advisor.roofline import compute_dtype, describe, for_rate, peak_tflops, utilization

# ----------------------------------------------------------------------------- name matching

@pytest.mark.parametrize("name, dtype, want", [
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4),     # the SXM part
    ("NVIDIA H100 80GB HBM3", "tf32", 494.7),
    ("NVIDIA H100 80GB HBM3", "fp32", 66.9),
    ("NVIDIA H100 80GB HBM3", "fp8", 1978.9),
    ("NVIDIA H100 PCIe", "bf16", 756.5),
    ("NVIDIA H100 PCIe", "tf32", 378.0),
    ("NVIDIA H100 PCIe", "fp32", 51.2),
    ("NVIDIA H100 NVL", "bf16", 835.5),
    ("NVIDIA H100 NVL", "tf32", 417.5),
    ("NVIDIA H200", "bf16", 989.4),
    ("NVIDIA H200", "fp16", 989.4),
    ("NVIDIA GH200 480GB", "bf16", 989.4),
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),
    ("NVIDIA A100-SXM4-40GB", "tf32", 156.0),
    ("NVIDIA A100-PCIE-40GB", "fp16", 312.0),
    ("NVIDIA A100 80GB PCIe", "fp32", 19.5),
    ("NVIDIA A10", "bf16", 125.0),
    ("NVIDIA L4", "bf16", 121.0),
    ("NVIDIA L4", "tf32", 60.0),
    ("NVIDIA L4", "fp32", 30.3),
    ("NVIDIA L40S", "bf16", 362.0),
    ("NVIDIA L40S", "fp32", 91.6),
    ("Tesla V100-SXM2-16GB", "fp16", 125.0),
    ("Tesla V100-SXM2-16GB", "fp32", 15.7),
    ("Tesla T4", "fp16", 65.0),
    ("Tesla T4", "fp32", 8.1),
    ("nvidia h100 80gb hbm3", "bf16", 989.4),     # case-insensitive
])
def test_peak_for_real_device_names(name, dtype, want):
    assert peak_tflops(name, dtype) == pytest.approx(want)


@pytest.mark.parametrize("name", [
    "NVIDIA GeForce RTX 4090", "NVIDIA A10G", "NVIDIA L40", "NVIDIA H20", "AMD Instinct MI300X", "", None,
])
def test_unknown_gpu_gives_none(name):
    assert peak_tflops(name, "bf16") is None
    assert peak_tflops(name, "fp32") is None


def test_no_tensor_core_path_gives_none():
    assert peak_tflops("Tesla V100-SXM2-16GB", "bf16") is None
    assert peak_tflops("Tesla V100-SXM2-16GB", "tf32") is None
    assert peak_tflops("Tesla T4", "bf16") is None
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "fp8") is None
    assert peak_tflops("NVIDIA H100 80GB HBM3", "int4") is None


def test_more_specific_patterns_win():
    assert peak_tflops("NVIDIA H100 PCIe", "bf16") < peak_tflops("NVIDIA H100 NVL", "bf16") \
        < peak_tflops("NVIDIA H100 80GB HBM3", "bf16")
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "bf16") != peak_tflops("NVIDIA A10", "bf16")
    assert peak_tflops("NVIDIA L40S", "bf16") != peak_tflops("NVIDIA L4", "bf16")


def test_dense_not_sparse():
    # the "with sparsity" datasheet figures are twice these
    assert peak_tflops("NVIDIA H100 80GB HBM3", "bf16") < 1000
    assert peak_tflops("NVIDIA H100 80GB HBM3", "tf32") < 500
    assert peak_tflops("NVIDIA A100-SXM4-80GB", "tf32") < 200
    assert peak_tflops("NVIDIA L4", "bf16") < 200
    for _, peaks in roofline._PEAKS:
        assert set(peaks) <= set(roofline.DTYPES)
        # tensor-core bf16/fp16 is 2x TF32 on every GPU that has both
        if "tf32" in peaks:
            assert peaks["bf16"] == pytest.approx(2 * peaks["tf32"], rel=0.02)
        assert peaks["fp16"] > peaks["fp32"]


# ----------------------------------------------------------------------------- compute dtype

def _entry(value, where="train.py:12"):
    return {"value": value, "where": where}


def _backends(matmul=False, cudnn=True, precision="highest"):
    """The five backend keys as Observer.config_doc writes them (defaults: torch's)."""
    return {"cudnn.benchmark": _entry(False, None), "cudnn.deterministic": _entry(False, None),
            "tf32.matmul": _entry(matmul, None), "tf32.cudnn": _entry(cudnn, None),
            "float32_matmul_precision": _entry(precision, None)}


def _params(dtype="float32", conv=None):
    return {"parameters": _entry({"dtype": dtype, "conv_memory_format": conv, "count": 1000,
                                  "device": "cuda:0"})}


def _autocast(dtype="bfloat16", enabled=True, device_type="cuda"):
    return {"autocast": _entry({"enabled": enabled, "dtype": dtype, "device_type": device_type})}


def test_no_config_is_fp32():
    assert compute_dtype({}) == "fp32"
    assert compute_dtype(None) == "fp32"


def test_defaults_transformer_is_fp32():
    assert compute_dtype({**_backends(), **_params()}) == "fp32"


def test_autocast():
    assert compute_dtype({**_backends(), **_params(), **_autocast("bfloat16")}) == "bf16"
    assert compute_dtype({**_backends(), **_params(), **_autocast("float16")}) == "fp16"
    # autocast wins over TF32 flags: the matmuls inside it run in half precision
    assert compute_dtype({**_backends(matmul=True, precision="high"), **_autocast("bfloat16")}) == "bf16"


def test_autocast_that_changes_nothing():
    assert compute_dtype({**_backends(), **_params(), **_autocast("bfloat16", enabled=False)}) == "fp32"
    assert compute_dtype({**_backends(), **_params(), **_autocast("float32")}) == "fp32"  # nanoGPT float32
    assert compute_dtype({**_backends(), **_params(), **_autocast("bfloat16", device_type="cpu")}) == "fp32"
    assert compute_dtype({**_backends(matmul=True), **_autocast("float32")}) == "tf32"


def test_half_model_without_autocast():
    assert compute_dtype({**_backends(), **_params("bfloat16")}) == "bf16"
    assert compute_dtype({**_backends(), **_params("float16")}) == "fp16"


def test_tf32_matmul():
    assert compute_dtype({**_backends(matmul=True), **_params()}) == "tf32"
    assert compute_dtype({**_backends(precision="high"), **_params()}) == "tf32"
    assert compute_dtype({**_backends(precision="medium"), **_params()}) == "tf32"
    assert compute_dtype({**_backends(matmul=False, precision="highest"), **_params()}) == "fp32"


def test_conv_tf32():
    # an fp32 CNN with torch's defaults (cudnn.allow_tf32 True) runs its convolutions on TF32
    assert compute_dtype({**_backends(), **_params(conv="contiguous")}) == "tf32"
    assert compute_dtype({**_backends(), **_params(conv="channels_last")}) == "tf32"
    assert compute_dtype({**_backends(cudnn=False), **_params(conv="contiguous")}) == "fp32"
    # no convolutions: the cuDNN flag alone says nothing
    assert compute_dtype({**_backends(cudnn=True), **_params(conv=None)}) == "fp32"


# ----------------------------------------------------------------------------- utilization

def test_utilization_arithmetic():
    # 312e12 FLOPs in a 1000 ms step = 312 TFLOP/s
    u = utilization(312e12, 1000.0, "NVIDIA A100-SXM4-80GB", "bf16")
    assert u == {"flops_per_step": 312e12, "achieved_tflops": pytest.approx(312.0),
                 "peak_tflops": 312.0, "dtype": "bf16", "mfu": pytest.approx(1.0)}
    u = utilization(3.115e12, 10.0, "NVIDIA H100 80GB HBM3", "bf16")
    assert u["achieved_tflops"] == pytest.approx(311.5)
    assert u["mfu"] == pytest.approx(311.5 / 989.4)


def test_utilization_unknowns():
    u = utilization(None, 10.0, "NVIDIA H100 80GB HBM3", "bf16")
    assert u["achieved_tflops"] is None and u["mfu"] is None and u["peak_tflops"] == 989.4
    for bad in (None, 0, -1.0, float("nan"), float("inf")):
        u = utilization(1e12, bad, "NVIDIA H100 80GB HBM3", "bf16")
        assert u["achieved_tflops"] is None and u["mfu"] is None
    u = utilization(1e12, 10.0, "NVIDIA GeForce RTX 4090", "bf16")
    assert u["achieved_tflops"] == pytest.approx(100.0)
    assert u["peak_tflops"] is None and u["mfu"] is None
    u = utilization(1e12, 10.0, None, "fp32")
    assert u["peak_tflops"] is None and u["mfu"] is None and u["dtype"] == "fp32"


def test_utilization_tf32_before_ampere_is_fp32():
    u = utilization(1e12, 1000.0, "Tesla V100-SXM2-16GB", "tf32")
    assert u["dtype"] == "fp32" and u["peak_tflops"] == 15.7
    assert u["mfu"] == pytest.approx(1.0 / 15.7)
    u = utilization(1e12, 1000.0, "Tesla V100-SXM2-16GB", "bf16")
    assert u["peak_tflops"] is None and u["mfu"] is None


def test_for_rate():
    # 6 GFLOP per sample at 10,000 samples/s = 60 TFLOP/s
    u = for_rate(6e9, 10_000.0, "NVIDIA A100-SXM4-80GB", "tf32")
    assert u["achieved_tflops"] == pytest.approx(60.0)
    assert u["mfu"] == pytest.approx(60.0 / 156.0)
    assert u["flops_per_step"] is None and u["flops_per_sample"] == 6e9
    assert for_rate(6e9, None, "NVIDIA L4", "bf16")["achieved_tflops"] is None
    assert for_rate(None, 100.0, "NVIDIA L4", "bf16")["mfu"] is None


def test_numpy_scalars_count():
    np = pytest.importorskip("numpy")
    u = utilization(np.int64(10**12), np.float32(10.0), "NVIDIA L4", "bf16")
    assert math.isclose(u["achieved_tflops"], 100.0, rel_tol=1e-6)


# ----------------------------------------------------------------------------- describe

def test_describe():
    u = utilization(3.12e12, 10.0, "NVIDIA H100 80GB HBM3", "bf16")
    assert describe(u) == "312 TFLOP/s achieved of 989 bf16 peak (MFU 31.5%)"
    u = utilization(0.412e12, 10.0, "NVIDIA GeForce RTX 4090", "bf16")
    assert describe(u) == "41.2 TFLOP/s achieved (no peak known for this GPU)"
    u = utilization(1e12, 1000.0, "NVIDIA A100-SXM4-80GB", "fp32")
    assert describe(u) == "1 TFLOP/s achieved of 19.5 fp32 peak (MFU 5.1%)"
    u = utilization(None, 10.0, "NVIDIA H100 80GB HBM3", "fp8")
    assert describe(u) == "achieved TFLOP/s unknown (no FLOP count or step time; 1979 fp8 peak)"
    assert describe(utilization(None, None, None, "fp32")) == \
        "achieved TFLOP/s unknown (no FLOP count or step time)"
