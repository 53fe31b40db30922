"""Record real (CPU-only) torch.profiler traces of a tiny training loop, for the trace tests.

Each recorder returns the path of what it wrote; ``record_all`` is cached so a pytest session
records once however many test modules ask.
"""
from __future__ import annotations

import contextlib
import functools
import os
import tempfile

import torch
import torch.nn as nn
from torch.profiler import (
    ProfilerActivity,
    profile,
    record_function,
    schedule,
    tensorboard_trace_handler,
)

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "traces")
GPU_CONFIGS = ("fp32_nchw", "tf32_nchw", "amp_bf16_nchw", "amp_fp16_scaler_nchw",
               "amp_fp16_noscaler_nchw", "amp_bf16_channels_last", "sync_item", "slow_loader",
               "no_annotations", "resnet50_bf16_nchw")


def gpu_fixture(name: str) -> str:
    return os.path.join(FIXTURES, f"{name}.pt.trace.json.gz")


def _setup(seed: int = 0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 14 * 14, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ds = torch.utils.data.TensorDataset(torch.randn(96, 3, 16, 16), torch.randint(0, 10, (96,)))
    loader = torch.utils.data.DataLoader(ds, batch_size=8)
    return model, opt, iter(loader)


def _step(model, opt, it, annotate: bool, use_opt: bool = True, stop_after: str | None = None):
    rng = record_function if annotate else (lambda _n: contextlib.nullcontext())
    with rng("advisor::data"):
        x, y = next(it)
    with rng("advisor::forward"):
        loss = nn.functional.cross_entropy(model(x), y)
    if stop_after == "forward":
        return
    with rng("advisor::backward"):
        loss.backward()
    if use_opt:
        with rng("advisor::optimizer"):
            opt.step()
    with rng("advisor::zero_grad"):
        opt.zero_grad(set_to_none=False)


def record_tb(out: str) -> str:
    """advisor:: ranges + prof.step() with a schedule; TensorBoard layout, gzipped."""
    model, opt, it = _setup()
    logdir = os.path.join(out, "run", "tb", "baseline")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                 schedule=schedule(wait=0, warmup=1, active=4),
                 on_trace_ready=tensorboard_trace_handler(logdir, use_gzip=True)) as prof:
        for _ in range(5):
            _step(model, opt, it, annotate=True)
            prof.step()
    return os.path.join(out, "run")


def record_plain(out: str, annotate: bool, use_opt: bool, name: str) -> str:
    """No prof.step(): no ProfilerStep#N; exported with export_chrome_trace (plain .json)."""
    model, opt, it = _setup()
    for _ in range(1):
        _step(model, opt, it, annotate=False)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(6):
            _step(model, opt, it, annotate=annotate, use_opt=use_opt)
    path = os.path.join(out, f"{name}.pt.trace.json")
    prof.export_chrome_trace(path)
    return path


def record_cut(out: str) -> str:
    """Profiler started mid-step (after optimizer) and stopped mid-step (after forward)."""
    model, opt, it = _setup()
    # A schedule is what makes torch record ProfilerStep#N; warmup=0 starts recording at start().
    prof = profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=9))
    x, y = next(it)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    prof.start()                   # ProfilerStep#0 holds only zero_grad
    opt.zero_grad()
    prof.step()
    for _ in range(3):
        _step(model, opt, it, annotate=True)
        prof.step()
    _step(model, opt, it, annotate=True, stop_after="forward")
    prof.stop()                    # the last ProfilerStep has no optimizer step
    path = os.path.join(out, "cut.pt.trace.json")
    prof.export_chrome_trace(path)
    return path


@functools.cache
def record_all() -> dict[str, str]:
    out = tempfile.mkdtemp(prefix="advisor-cpu-traces-")
    return {
        "tb_run": record_tb(out),
        "plain_annotated": record_plain(out, annotate=True, use_opt=True, name="plain_annotated"),
        "plain_torch_only": record_plain(out, annotate=False, use_opt=True, name="plain_torch"),
        "no_optimizer": record_plain(out, annotate=False, use_opt=False, name="no_opt"),
        "cut": record_cut(out),
        "dir": out,
    }
