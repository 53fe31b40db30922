"""Run-time fixes in a real child process: each takes effect, and they compose — notably
under torch.compile, whose compiled region must not swallow the other fixes' hooks."""

from __future__ import annotations

import pytest
from test_runner_support import STEP_GUARD, run_advised, write

SCRIPT = """
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(), torch.nn.Linear(8 * 6 * 6, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 3, 8, 8)
    seen = set()
    for i in range(10000):
        out = model(x)
        key = (str(out.dtype), model[0].weight.is_contiguous(memory_format=torch.channels_last))
        if key not in seen and i >= 2:  # the first call runs before a lazy compile takes over
            seen.add(key)
            print("observed", *key, flush=True)
        out.float().sum().backward()
        opt.step()
        opt.zero_grad()
"""


def _observed(capfd, tmp_path, fixes: list[dict]) -> set[tuple[str, str]]:
    script = write(tmp_path / "train.py", SCRIPT)
    res, out, err, _ = run_advised(capfd, script, ["train.py"], str(tmp_path), str(tmp_path / "run"), timeout=300,
                                   step_timeout=STEP_GUARD, warmup_steps=3, profile_steps=0, measure_steps=3,
                                   measure_min_s=0, interventions=fixes)
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    assert len(res["interventions_applied"]) == len(fixes)
    return {tuple(line.split()[1:]) for line in out.splitlines() if line.startswith("observed ")}


AMP = {"name": "amp", "params": {"dtype": "bfloat16"}}
CL = {"name": "channels-last", "params": {}}


@pytest.mark.parametrize("fixes,want", [
    ([], {("torch.float32", "False")}),
    ([AMP], {("torch.bfloat16", "False")}),
    ([CL], {("torch.float32", "True")}),
    ([AMP, CL], {("torch.bfloat16", "True")}),
])
def test_fixes_take_effect(capfd, tmp_path, fixes, want):
    assert _observed(capfd, tmp_path, fixes) == want


def test_autocast_and_channels_last_still_apply_under_compile(capfd, tmp_path):
    compiled = {"name": "torch-compile", "params": {"mode": "default"}}
    assert _observed(capfd, tmp_path, [compiled, AMP, CL]) == {("torch.bfloat16", "True")}


def test_the_runner_and_the_fixes_break_no_compiled_graph(capfd, tmp_path):
    """Every module call inside the compiled forward goes through the runner's and the fixes'
    global hooks, which Dynamo traces: one call it will not trace (get_worker_info) breaks the
    graph at each module (so broken, a CIFAR stack on an H100 ran compiled at 22 ms a step,
    against 10.9 eager). One graph, no break."""
    script = write(tmp_path / "train.py", """
        import torch
        from torch._dynamo.utils import counters
        block = lambda: torch.nn.Sequential(torch.nn.Conv2d(3, 3, 3, padding=1), torch.nn.BatchNorm2d(3), torch.nn.ReLU())
        model = torch.nn.Sequential(block(), block(), torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(10000):
            model(torch.randn(4, 3, 8, 8)).float().sum().backward()
            opt.step()
            opt.zero_grad()
            if i == 3:
                print("breaks", sum(counters["graph_break"].values()), "graphs", counters["stats"]["unique_graphs"], flush=True)
    """)
    compiled = {"name": "torch-compile", "params": {"mode": "default"}}
    res, out, err, _ = run_advised(capfd, script, ["train.py"], str(tmp_path), str(tmp_path / "run"), timeout=300,
                                   step_timeout=STEP_GUARD, warmup_steps=5, profile_steps=0, measure_steps=2, measure_min_s=0,
                                   interventions=[compiled, AMP, CL])
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    assert "breaks 0 graphs 1" in out, out[-2000:]


FIRST_CALL = """
    import torch
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(4, 8), torch.tensor([0, 1, 0, 1])
    for i in range(10000):
        out = model(x)
        if i < 2:
            restored = torch.nn.Module.__call__ is torch.nn.Module._wrapped_call_impl
            print("grad_fn", i, type(out.grad_fn).__name__, restored, flush=True)
        loss_fn(out, y).backward()
        opt.step()
        opt.zero_grad()
"""


def test_the_model_runs_compiled_from_its_first_call(capfd, tmp_path):
    """The trial compiles the model before its first call, as the edited script does: no eager
    first step beside the compile (on an H100 that step, with its own cudnn.benchmark search,
    cost 18-21 s of each compiled trial's warm-up). The loss module is not compiled."""
    script = write(tmp_path / "train.py", FIRST_CALL)
    res, out, err, _ = run_advised(capfd, script, ["train.py"], str(tmp_path), str(tmp_path / "run"), timeout=300,
                                   step_timeout=STEP_GUARD, warmup_steps=3, profile_steps=0, measure_steps=3, measure_min_s=0,
                                   interventions=[{"name": "torch-compile", "params": {"mode": "default"}}])
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    firsts = [line.split()[1:] for line in out.splitlines() if line.startswith("grad_fn ")]
    # compiled from the first call; Module.__call__ is torch's own again once the model is found
    assert firsts == [["0", "CompiledFunctionBackward", "True"], ["1", "CompiledFunctionBackward", "True"]], firsts


@pytest.mark.parametrize("workers", [0, 2])
def test_dataset_transform_modules_are_the_data_pipeline_not_the_model(capfd, tmp_path, workers):
    """torchvision transforms are nn.Modules; with num_workers=0 they run in the main process,
    inside DataLoader.__next__, else in the worker processes (where a fix entering CUDA
    autocast kills the trial: CUDA cannot start in a forked worker). The batch
    size, the model's observed input and the fixes are the model's, not a per-sample
    Normalize's."""
    script = write(tmp_path / "train.py", """
        import sys
        import torch
        class Normalize(torch.nn.Module):
            def forward(self, x):
                print("transform autocast", torch.is_autocast_enabled("cpu"), flush=True)
                return (x - 0.5) / 0.25
        class Data(torch.utils.data.Dataset):
            norm = Normalize()
            def __len__(self): return 64
            def __getitem__(self, i): return self.norm(torch.rand(3, 8, 8)), i % 2
        loader = torch.utils.data.DataLoader(Data(), batch_size=16, num_workers=int(sys.argv[1]))
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 8 * 8, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(1000):
            for x, y in loader:
                out = model(x)
                print("model dtype", out.dtype, flush=True)
                torch.nn.functional.cross_entropy(out.float(), y).backward()
                opt.step()
                opt.zero_grad()
    """)
    res, out, err, _ = run_advised(capfd, script, ["train.py", str(workers)], str(tmp_path), str(tmp_path / "run"),
                                   timeout=300, warmup_steps=2, profile_steps=1, measure_steps=4, measure_min_s=0,
                                   interventions=[AMP])
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    assert res["batch_size"] == 16 and res["batch_size_source"] == "dataloader"
    assert res["config"]["input"]["value"]["shape"] == [16, 3, 8, 8]
    assert "transform autocast True" not in out and "transform autocast False" in out
    assert "model dtype torch.bfloat16" in out


def test_cuda_graph_compile_sets_gradients_to_none(capfd, tmp_path):
    """torch.compile with CUDA graphs (reduce-overhead) needs gradients set to None between
    steps; its code edit makes zero_grad(set_to_none=True), and so does the trial, to measure
    what the edit ships."""
    script = write(tmp_path / "train.py", """
        import torch
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(10000):
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            print("grad", model.weight.grad is None, flush=True)
    """)
    fix = {"name": "torch-compile", "params": {"mode": "reduce-overhead"}}
    res, out, err, _ = run_advised(capfd, script, ["train.py"], str(tmp_path), str(tmp_path / "run"), timeout=300,
                                   step_timeout=STEP_GUARD, warmup_steps=2, profile_steps=0, measure_steps=2, measure_min_s=0,
                                   interventions=[fix])
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    assert res["interventions_applied"] == ["torch.compile(model, mode='reduce-overhead') with zero_grad(set_to_none=True)"]
    assert {line for line in out.splitlines() if line.startswith("grad")} == {"grad True"}


BENCHMARK_SCRIPT = """
    import torch
    import torch.backends.cudnn as cudnn
    model = torch.nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    cudnn.benchmark = True          # the script's own choice, as kuangliu's main.py makes it
    print("benchmark", torch.backends.cudnn.benchmark, flush=True)
    for i in range(10000):
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
"""


@pytest.mark.parametrize("fix,want", [("no-cudnn-benchmark", "False"), ("cudnn-benchmark", "True")])
def test_cudnn_benchmark_is_held_whatever_the_script_sets(capfd, tmp_path, fix, want):
    """no-cudnn-benchmark keeps benchmark mode off where the script turns it on (ADV124), as
    cudnn-benchmark keeps it on; the config the runner observes says what the run used."""
    script = write(tmp_path / "train.py", BENCHMARK_SCRIPT)
    res, out, err, _ = run_advised(capfd, script, ["train.py"], str(tmp_path), str(tmp_path / "run"), timeout=300,
                                   step_timeout=STEP_GUARD, warmup_steps=2, profile_steps=0, measure_steps=3,
                                   measure_min_s=0, interventions=[{"name": fix, "params": {}}])
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    assert [line.split()[1] for line in out.splitlines() if line.startswith("benchmark ")] == [want]
    assert res["config"]["cudnn.benchmark"]["value"] is (want == "True")
