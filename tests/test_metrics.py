"""Metrics on real traces: CPU traces recorded here, the H200 fixtures, and one hand-built GPU
trace whose breakdown is known to the microsecond."""
from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np
import orjson
import pytest
from cpu_traces import GPU_CONFIGS, gpu_fixture, record_all

from advisor.metrics import analyze, follow_gpu, step_breakdown_cpu, union_pieces
from advisor.trace import load_trace
from advisor.trace.classify import CODE
from advisor.trace.phases import PHASES, P, gpu_ops, timeline


@pytest.fixture(scope="session")
def cpu() -> dict:
    return record_all()


def _gpu(config: str):
    path = gpu_fixture(config)
    if not os.path.exists(path):
        pytest.fail(f"fixture missing: {path}")
    return load_trace(path)


def _sums_to_step(a: dict):
    assert set(a["breakdown"]) == set(PHASES)
    assert sum(a["breakdown"].values()) == pytest.approx(a["step_time_ms"], abs=1e-6)
    assert all(v >= 0 for v in a["breakdown"].values())


# --- CPU traces ----------------------------------------------------------------------

def _advisor_ms_per_step(path: str, steps) -> list[dict]:
    """Independent reference: per step, ms of each advisor:: range (read with json)."""
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        ev = json.load(f)["traceEvents"]
    t0 = min(e["ts"] for e in ev if e.get("cat") in ("cpu_op", "user_annotation", "cpu_instant_event"))
    out = []
    for s, d, _ in steps:
        row = {}
        for e in ev:
            if e.get("cat") == "user_annotation" and e["name"].startswith("advisor::"):
                if s <= e["ts"] - t0 < s + d:
                    row[e["name"]] = row.get(e["name"], 0) + e["dur"] / 1000
        out.append(row)
    return out


def test_cpu_breakdown_is_the_advisor_ranges(cpu):
    m = load_trace(cpu["tb_run"])
    a = analyze(m)
    _sums_to_step(a)
    assert a["has_gpu"] is False and a["gpu_busy_pct"] is None and a["kernels_per_step"] == 0
    assert a["breakdown"]["gpu_idle"] == 0 and a["steps_in_trace"] == 4
    tl = timeline(m)
    ref = _advisor_ms_per_step(m.meta["trace_path"], m.steps)
    names = {"data_wait": "advisor::data", "forward": "advisor::forward",
             "backward": "advisor::backward", "optimizer": "advisor::optimizer",
             "zero_grad": "advisor::zero_grad"}
    for (s, d, _), want in zip(m.steps, ref):
        got = step_breakdown_cpu(tl, s, s + d) / 1000
        assert got.sum() == pytest.approx(d / 1000)
        for phase, rng in names.items():
            assert got[P[phase]] == pytest.approx(want[rng], abs=2e-3), phase
    # only the glue between ranges is "other" (median over steps: this 2-core box stalls)
    other = [step_breakdown_cpu(tl, s, s + d)[P["other"]] / d for s, d, _ in m.steps]
    assert np.median(other) < 0.2


def _step_shares(m) -> np.ndarray:
    tl = timeline(m)
    return np.array([step_breakdown_cpu(tl, s, s + d) / d for s, d, _ in m.steps])


def test_cpu_breakdown_with_torch_annotations_only(cpu):
    """The same recorded events with the advisor:: ranges removed: DataLoader / Optimizer /
    autograd annotations stand in, and each phase's share of a step stays close (median over
    steps: a stall of this shared 2-core machine can land between two definitions)."""
    m = load_trace(cpu["plain_annotated"])
    assert analyze(m)["phase_sources"]["forward"] == "advisor"
    ref = _step_shares(m)
    m.cpu = m.cpu.take(~m.name_mask(lambda n: n.startswith("advisor::"))[m.cpu.name_id])
    b = analyze(m)
    _sums_to_step(b)
    assert b["phase_sources"]["forward"] == "torch" and b["phase_sources"]["backward"] == "torch"
    got = _step_shares(m)
    for phase in ("data_wait", "forward", "backward", "optimizer", "zero_grad"):
        assert b["breakdown"][phase] > 0
        diff = np.median(np.abs(got[:, P[phase]] - ref[:, P[phase]]))
        assert diff < 0.1, (phase, got[:, P[phase]], ref[:, P[phase]])
    c = analyze(load_trace(cpu["plain_torch_only"]))  # recorded without any advisor:: range
    _sums_to_step(c)
    assert all(c["breakdown"][p] > 0 for p in ("data_wait", "forward", "backward", "optimizer"))


def test_whole_trace_step_still_splits_phases(cpu):
    a = analyze(load_trace(cpu["no_optimizer"]))
    _sums_to_step(a)
    assert a["steps_in_trace"] == 1 and a["step_source"] == "trace"
    assert a["breakdown"]["forward"] > 0 and a["breakdown"]["backward"] > 0
    assert a["breakdown"]["other"] < 0.25 * a["step_time_ms"]


def test_analysis_is_json_ready(cpu):
    for key in ("tb_run", "cut", "no_optimizer"):
        orjson.dumps(analyze(load_trace(cpu[key])))


# --- a hand-built GPU trace with a known answer --------------------------------------------

def _x(cat, name, ts, dur, tid=1, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": 1000 + ts,
            "dur": dur, "args": args}


def _k(cat, name, ts, dur, corr, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": 1000 + ts, "dur": dur,
            "args": {"device": 0, "stream": 7, "correlation": corr, **args}}


TC_K = "sm90_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x64x64"
ADD_K = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
         "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)")


def known_trace() -> dict:
    """One 100 us step. There is no advisor::h2d range, so the HtoD cudaMemcpyAsync call itself
    is the h2d range (innermost, inside advisor::data). Expected, instant by instant:
    [0,4) idle in data -> data_wait       | [4,6) idle in the copy call -> h2d
    [6,10) idle in data -> data_wait      | [10,15) HtoD copy launched by that call -> h2d
    [15,20) idle in data -> data_wait     | [20,30) idle, CPU in forward -> gpu_idle
    [30,60) GEMM launched in forward      | [60,95) add launched by autograd thread -> backward
    [95,97) add launched in optimizer     | [97,97.5) idle -> gpu_idle
    [97.5,98.5) DtoH of .item() -> other  | [98.5,100) idle -> gpu_idle
    """
    ev = [
        _x("user_annotation", "ProfilerStep#1", 0, 100),
        _x("user_annotation", "advisor::data", 0, 20),
        _x("cuda_runtime", "cudaMemcpyAsync", 4, 2, correlation=10),
        _x("cuda_runtime", "cudaStreamSynchronize", 16, 3, correlation=11),
        _x("user_annotation", "advisor::forward", 20, 30),
        _x("cuda_runtime", "cudaLaunchKernel", 25, 1, correlation=1),
        _x("user_annotation", "advisor::backward", 50, 40),
        _x("cpu_op", "autograd::engine::evaluate_function: ConvolutionBackward0", 52, 6, tid=2),
        _x("cuda_runtime", "cudaLaunchKernel", 55, 1, tid=2, correlation=2),
        _x("user_annotation", "advisor::optimizer", 90, 5),
        _x("cuda_runtime", "cudaLaunchKernel", 92, 1, correlation=3),
        _x("cpu_op", "aten::item", 95.5, 4),
        _x("cpu_op", "aten::_local_scalar_dense", 95.6, 3.8),
        _x("cuda_runtime", "cudaMemcpyAsync", 96, 3, correlation=5),
        _k("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", 10, 5, 10, bytes=1000),
        _k("kernel", TC_K, 30, 30, 1),
        _k("kernel", ADD_K, 60, 35, 2),
        _k("kernel", ADD_K, 95, 2, 3),
        _k("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 97.5, 1, 5, bytes=4),
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "s": "t",
         "ts": 1040, "args": {"Total Allocated": 5_000_000_000, "Total Reserved": 6_000_000_000,
                              "Device Id": 0, "Device Type": 1, "Bytes": 1}},
    ]
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "totalGlobalMem": 80_000_000_000}],
            "traceEvents": ev}


def test_known_gpu_breakdown(tmp_path):
    p = tmp_path / "known.pt.trace.json"
    p.write_text(json.dumps(known_trace(), indent=1))
    a = analyze(load_trace(p))
    want = {"data_wait": 0.013, "h2d": 0.007, "forward": 0.030, "backward": 0.035, "zero_grad": 0.0,
            "optimizer": 0.002, "other": 0.001, "gpu_idle": 0.012}
    assert a["step_time_ms"] == pytest.approx(0.1)
    for k, v in want.items():
        assert a["breakdown"][k] == pytest.approx(v, abs=1e-9), k
    assert a["gpu_busy_pct"] == pytest.approx(73.0)
    assert a["syncs_per_step"] == 2  # cudaStreamSynchronize + one .item() (3 calls, one episode)
    assert a["memcpy"]["HtoD"]["pageable_bytes"] == 1000 and a["memcpy"]["HtoD"]["pinned_bytes"] == 0
    assert a["memcpy"]["DtoH"]["pageable_bytes"] == 4
    frac = a["kernel_time_by_class"]
    assert frac["tc_gemm_conv"] == pytest.approx(30 / 73)
    assert frac["elementwise"] == pytest.approx(35 / 73)
    assert frac["optimizer"] == pytest.approx(2 / 73)  # elementwise, but launched by the optimizer
    assert frac["memcpy"] == pytest.approx(6 / 73)
    assert a["kernels_per_step"] == 3 and a["mean_kernel_us"] == pytest.approx(67 / 3)
    assert a["memory"]["peak_allocated_bytes"] == 5_000_000_000
    assert a["memory"]["capacity_bytes"] == 80_000_000_000
    assert a["top_kernels"][0]["name"] == ADD_K and a["top_kernels"][0]["ms"] == pytest.approx(0.037)
    assert sorted((s["name"], s["per_step"]) for s in a["syncs"]) == \
        [("aten::item", 1.0), ("cudaStreamSynchronize", 1.0)]
    assert a["sync_calls_per_step"]["cudaMemcpyAsync"] == 1  # the DtoH one; the HtoD copy does not block
    assert a["phase_class_ms"]["forward"] == {"tc_gemm_conv": pytest.approx(0.030)}
    assert a["phase_class_ms"]["optimizer"] == {"optimizer": pytest.approx(0.002)}
    assert a["phase_kernel_count"] == {"forward": 1, "backward": 1, "optimizer": 1}
    assert a["gpu_kernel_ms_per_step"] == pytest.approx(0.073)
    assert a["short_kernel_frac"] == pytest.approx(1 / 3)  # the 2 us add
    assert a["cpu_launch_ms_per_step"] == pytest.approx(0.003)  # three 1 us cudaLaunchKernel
    assert a["communication"] == {"ms_per_step": 0.0, "exposed_ms_per_step": 0.0, "source": None}


def test_exposed_communication(tmp_path):
    """NCCL [0,40) beside a GEMM [10,30): 40 us of communication, 20 us of it exposed."""
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 50),
          _k("kernel", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 0, 40, 1),
          {**_k("kernel", TC_K, 10, 20, 2), "tid": 8}]
    p = tmp_path / "comm.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    c = analyze(load_trace(p))["communication"]
    assert c["ms_per_step"] == pytest.approx(0.040) and c["exposed_ms_per_step"] == pytest.approx(0.020)
    assert c["source"] == "nccl"


def test_exposed_cpu_communication(tmp_path):
    """gloo collectives as CPU ops, known to the microsecond (one 60 us step):
    tid 2 gloo:all_reduce [10,50) with a copy nested in it [20,25) (part of the collective);
    tid 3 gloo:all_reduce [40,52) (a second runloop thread): collective union [10,52) = 42 us.
    tid 1 (main) DDP hook [0,30) holding the enqueue c10d::allreduce_ [8,14) (not compute),
    copy_bucket_to_grad [45,55) beside the collective's tail; advisor::backward [0,60) is a
    range, not compute. Compute beside the collectives: [14,30) + [45,52) = 23 us: 19 exposed."""
    ev = [_x("user_annotation", "ProfilerStep#1", 0, 60),
          _x("user_annotation", "advisor::backward", 0, 58),
          _x("cpu_op", "autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 0, 30),
          _x("cpu_op", "c10d::allreduce_", 8, 6),
          _x("user_annotation", "gloo:all_reduce", 10, 40, tid=2),
          _x("cpu_op", "aten::copy_", 20, 5, tid=2),
          _x("user_annotation", "gloo:all_reduce", 40, 12, tid=3),
          _x("cpu_op", "torch.distributed.ddp.reducer::copy_bucket_to_grad", 45, 10),
          _x("user_annotation", "advisor::optimizer", 55, 4),
          _x("user_annotation", "gloo:all_reduce", 70, 5, tid=2)]  # after the step: not counted
    p = tmp_path / "gloo.pt.trace.json"
    p.write_text(json.dumps({"traceEvents": ev}))
    a = analyze(load_trace(p))
    assert a["has_gpu"] is False
    assert a["communication"] == {"ms_per_step": pytest.approx(0.042),
                                  "exposed_ms_per_step": pytest.approx(0.019), "source": "cpu"}


def _gloo_union_ms(path: str) -> float:
    """Independent reference: union of the gloo:* ranges starting in the trace's one
    ProfilerStep, read with json and merged by hand."""
    with gzip.open(path, "rb") as f:
        ev = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    (step,) = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("gloo:")
                   and step["ts"] <= e["ts"] < step["ts"] + step["dur"])
    total, reach = 0.0, -np.inf
    for s, e in spans:
        total += max(0.0, e - max(s, reach))
        reach = max(reach, e)
    return total / 1000


def _ddp(name: str) -> tuple[dict, dict]:
    path = gpu_fixture(name)
    a = analyze(load_trace(path))
    return a, {**a["communication"], "ref_ms": _gloo_union_ms(path)}


def test_cpu_ddp_exposed_communication():
    """Real 2-rank CPU DDP (gloo), one bucket: the all-reduce runs after backward, the main
    thread only waits for it."""
    for rank in (0, 1):
        a, c = _ddp(f"ddp_cpu_exposed_rank{rank}")
        assert c["source"] == "cpu" and c["ms_per_step"] == pytest.approx(c["ref_ms"])
        assert c["exposed_ms_per_step"] >= 0.9 * c["ms_per_step"]
        assert c["exposed_ms_per_step"] > 0.2 * a["step_time_ms"]
        assert c["ms_per_step"] < a["step_time_ms"]


def test_cpu_ddp_straggler_waits_in_collectives():
    """Rank 1 sleeps 30 ms before each forward: rank 0 spends far longer in gloo:all_reduce; part
    of its wait (the first bucket's) is hidden behind the rest of backward."""
    a0, c0 = _ddp("ddp_cpu_straggler_rank0")
    a1, c1 = _ddp("ddp_cpu_straggler_rank1")
    for c in (c0, c1):
        assert c["source"] == "cpu" and c["ms_per_step"] == pytest.approx(c["ref_ms"])
        assert 0 < c["exposed_ms_per_step"] <= c["ms_per_step"]
    assert c0["ms_per_step"] > 3 * c1["ms_per_step"]
    assert c0["ms_per_step"] - c1["ms_per_step"] > 25.0
    assert c0["exposed_ms_per_step"] < 0.9 * c0["ms_per_step"]
    assert a1["breakdown"]["data_wait"] == pytest.approx(30, abs=3)  # the sleep
    assert a0["step_time_ms"] == pytest.approx(a1["step_time_ms"], rel=0.05)  # collectives align them


def test_nccl_straggler_waits_on_the_gpu_after_its_host_step():
    """2 H200s, rank 1 sleeps 30 ms before each forward. Rank 0's host leaves the step in 5 ms;
    its all-reduce then waits for rank 1 on the GPU. Its step lasts until that GPU work is done,
    so both ranks' steps match (the recorder timed 35.6 ms a step on each) and the wait shows as
    rank 0's NCCL time, rank 1's as its data wait."""
    a0, a1 = (analyze(load_trace(gpu_fixture(f"ddp_nccl_straggler_rank{r}"))) for r in (0, 1))
    for a in (a0, a1):
        _sums_to_step(a)
        assert a["step_time_ms"] == pytest.approx(35.6, rel=0.1)
    c0, c1 = a0["communication"], a1["communication"]
    assert c0["source"] == c1["source"] == "nccl"
    assert c0["ms_per_step"] > 28.0 and c1["ms_per_step"] < 5.0
    assert a0["gpu_busy_pct"] > 90.0
    assert a1["breakdown"]["data_wait"] == pytest.approx(30, abs=3)  # the sleep


def test_step_windows_follow_the_gpu_work_they_launch():
    win = np.array([[0.0, 10.0], [10.0, 20.0], [20.0, 30.0]])
    # host-bound: each step's kernels end before the host moves on: the host's windows
    launch, end = np.array([1.0, 11.0, 21.0]), np.array([9.0, 19.0, 29.0])
    assert follow_gpu(win, launch, end).tolist() == win.tolist()
    # the host runs ahead of the GPU: a step lasts until its kernels are done, the next starts then
    launch, end = np.array([1.0, 11.0, 21.0]), np.array([25.0, 45.0, 65.0])
    assert follow_gpu(win, launch, end).tolist() == [[0, 25], [25, 45], [45, 65]]
    # work queued before the first step: the first window starts once it is done
    launch, end = np.array([-5.0, 1.0]), np.array([4.0, 8.0])
    assert follow_gpu(win[:1], launch, end).tolist() == [[4, 10]]


def test_a_gpu_bound_step_is_measured_on_the_gpu():
    """H200, ImageFolder ResNet-18 with 8 workers (a recorded trial): the host ran well ahead of
    the GPU in the profiled steps (its ranges: 15.9, 15.3, 43.8 ms). Timed without the
    profiler a step took 58.2 ms; the GPU's steps and kernel time must say so too."""
    run = Path(__file__).parent / "fixtures" / "runs" / "imagefolder_dali_h200"
    a = analyze(load_trace(str(next((run / "tb" / "01-dataloader-workers-8").glob("*.pt.trace.json.gz")))))
    _sums_to_step(a)
    assert a["step_time_ms"] == pytest.approx(58.2, rel=0.2)
    assert a["gpu_kernel_ms_per_step"] == pytest.approx(58.2, rel=0.2)
    assert a["gpu_busy_pct"] > 90.0


def test_union_pieces_charge_each_instant_once():
    s = np.array([0.0, 2.0, 4.0, 20.0])
    e = np.array([10.0, 5.0, 12.0, 21.0])
    ps, pe, lab = union_pieces(s, e, np.array([1, 2, 3, 4]))
    assert ps.tolist() == [0, 10, 20] and pe.tolist() == [10, 12, 21] and lab.tolist() == [1, 3, 4]


def test_memory_falls_back_to_child(cpu):
    child = {"memory": {"max_allocated_bytes": 123, "max_reserved_bytes": 456,
                        "capacity_bytes": 789}}
    mem = analyze(load_trace(cpu["tb_run"]), child)["memory"]
    assert (mem["peak_allocated_bytes"], mem["capacity_bytes"], mem["source"]) == (123, 789, "child")


# --- the real H200 traces ---------------------------------------------------------------

@pytest.mark.parametrize("config", GPU_CONFIGS)
def test_gpu_fixture_breakdown_sums(config):
    a = analyze(_gpu(config))
    _sums_to_step(a)
    assert 0 < a["gpu_busy_pct"] <= 100 and a["kernels_per_step"] > 100
    assert sum(a["kernel_time_by_class"].values()) == pytest.approx(1.0)
    assert a["memory"]["capacity_bytes"] > a["memory"]["peak_allocated_bytes"] > 0
    orjson.dumps(a)


def test_fp32_is_off_tensor_cores_with_fills_and_pageable_copies():
    m = _gpu("fp32_nchw")
    a = analyze(m)
    k = a["kernel_time_by_class"]
    assert k["tc_gemm_conv"] < 0.01 and k["gemm_conv"] > 0.5
    ops = gpu_ops(m, timeline(m))
    fills = (ops.cls == CODE["fill_memset"]) & (ops.phase == P["zero_grad"])
    assert fills.sum() > 10  # zero_grad(set_to_none=False): one FillFunctor per parameter
    assert a["phase_class_ms"]["zero_grad"]["fill_memset"] > 0
    assert a["phase_kernel_count"]["optimizer"] > 100  # foreach=False SGD: kernels per parameter
    assert a["phase_class_ms"]["optimizer"]["optimizer"] > 0
    # the blocking copies are the non_blocking=False HtoD copies' stream syncs
    assert {s["name"] for s in a["syncs"]} == {"aten::to (cudaStreamSynchronize)"}
    assert a["memcpy"]["HtoD"]["pageable_bytes"] > 0 and a["memcpy"]["HtoD"]["pinned_bytes"] == 0


@pytest.mark.parametrize("config", ["tf32_nchw", "amp_bf16_nchw", "amp_fp16_scaler_nchw",
                                    "amp_fp16_noscaler_nchw", "amp_bf16_channels_last",
                                    "resnet50_bf16_nchw"])
def test_reduced_precision_runs_on_tensor_cores(config):
    k = analyze(_gpu(config))["kernel_time_by_class"]
    assert k["tc_gemm_conv"] > k["gemm_conv"], k
    assert k["tc_gemm_conv"] / (k["tc_gemm_conv"] + k["gemm_conv"]) > 0.6


def test_layout_transposes_vanish_with_channels_last():
    cl = analyze(_gpu("amp_bf16_channels_last"))["kernel_time_by_class"]["layout_transpose"]
    assert cl < 0.005
    for config in ("tf32_nchw", "amp_bf16_nchw", "amp_fp16_noscaler_nchw"):
        nchw = analyze(_gpu(config))["kernel_time_by_class"]["layout_transpose"]
        assert nchw > 0.10, (config, nchw)


def test_syncs():
    a = analyze(_gpu("sync_item"))
    assert a["syncs_per_step"] >= 1
    assert sum(s["per_step"] for s in a["syncs"]) == a["syncs_per_step"]
    assert {s["name"] for s in a["syncs"]} == {"aten::item", "cudaDeviceSynchronize"}
    fast = analyze(_gpu("amp_bf16_channels_last"))  # pinned, non_blocking copies: no sync
    assert fast["syncs_per_step"] == 0
    scaler = analyze(_gpu("amp_fp16_scaler_nchw"))["syncs_per_step"]
    noscaler = analyze(_gpu("amp_fp16_noscaler_nchw"))["syncs_per_step"]
    assert scaler == noscaler + 1  # GradScaler.step reads found_inf with .item()


def test_slow_loader_is_data_bound():
    a = analyze(_gpu("slow_loader"))
    assert a["breakdown"]["data_wait"] > 0.5 * a["step_time_ms"]
    assert a["gpu_busy_pct"] < 10


def test_no_annotations_matches_annotated_run():
    """Same loop as fp32_nchw without advisor:: ranges: torch's annotations give the phases."""
    a, ref = analyze(_gpu("no_annotations")), analyze(_gpu("fp32_nchw"))
    _sums_to_step(a)
    assert a["steps_in_trace"] == 1
    assert set(a["phase_sources"].values()) <= {"torch", "runtime"}
    for phase in ("data_wait", "h2d", "forward", "backward", "optimizer", "zero_grad"):
        assert a["breakdown"][phase] > 0, phase
    for phase in ("forward", "backward", "optimizer"):
        assert a["breakdown"][phase] == pytest.approx(ref["breakdown"][phase], rel=0.25), phase


def test_gpu_phase_matches_launching_range():
    """Independent check of correlation-based attribution on a real trace: each kernel's
    launching runtime call, looked up by hand, sits inside the advisor range it is charged to."""
    m = _gpu("amp_bf16_nchw")
    ops = gpu_ops(m, timeline(m))
    names = {P[v]: k for k, v in {"advisor::data": "data_wait", "advisor::h2d": "h2d",
                                  "advisor::forward": "forward", "advisor::backward": "backward",
                                  "advisor::zero_grad": "zero_grad",
                                  "advisor::optimizer": "optimizer"}.items()}
    ranges = [(m.cpu.ts[i], m.cpu.ts[i] + m.cpu.dur[i], m.names[m.cpu.name_id[i]])
              for i in range(len(m.cpu)) if m.names[m.cpu.name_id[i]].startswith("advisor::")]
    launch = {c: t for c, t in zip(m.runtime.correlation.tolist(), m.runtime.ts.tolist())}
    k = m.kernels
    for j in range(len(k)):
        t = launch[int(k.correlation[j])]
        ph = int(ops.phase[j])
        if ph in names:
            assert any(a <= t <= b and n == names[ph] for a, b, n in ranges)
        else:
            assert not any(a <= t <= b for a, b, _ in ranges)
    counts = np.bincount(ops.phase[ops.kind == 0], minlength=len(PHASES))
    assert counts[P["backward"]] > counts[P["forward"]] > 0  # backward launches ~2x the kernels
