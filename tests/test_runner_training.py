"""The runner on real (tiny) training loops: steps, stages, trace, losses, config, stopping."""

from __future__ import annotations

import gzip
import json
import math
import os
import subprocess
import sys

import pytest
from test_runner_support import STEP_GUARD, line_of, run_advised, train_script, wait_until, write

from advisor.runner.window import CAP


def _trace_names(run_dir: str, rel: str) -> set[str]:
    with gzip.open(os.path.join(run_dir, rel), "rt") as f:
        doc = json.load(f)
    return {e.get("name", "") for e in doc["traceEvents"]}


def test_training_loop(tmp_path, capfd):
    script = train_script(tmp_path / "proj" / "train.py")
    run_dir = str(tmp_path / "run")
    res, out, err, progress = run_advised(capfd, script, ["train.py", "--lr", "1"],
                                          str(tmp_path / "proj"), run_dir)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["incomplete_reasons"] == []
    assert res["exit"] == {"code": 0, "exception": None, "stopped_by_advisor": True, "signal": None}
    assert "finished all epochs" not in out  # stopped long before the script's own end
    assert res["stage"] == "measured"
    # warmup 2, timed 5, then the profiler's warmup step and 2 profiled steps
    assert res["steps_seen"] == 10 and res["step_source"] == "optimizer-hook"
    assert len(res["step_times_ms"]) == 5 and all(t > 0 for t in res["step_times_ms"])
    assert len(res["data_wait_ms"]) == 5 and all(0 <= d < t for d, t in
                                                 zip(res["data_wait_ms"], res["step_times_ms"]))
    assert len(res["losses"]) == 10 and all(math.isfinite(x) for x in res["losses"])
    assert res["batch_size"] == 8 and res["batch_size_source"] == "dataloader"
    # .item() on device tensors is timed in the window (ADV110 reads the host's waits there);
    # this script reads CPU tensors only, which never wait for a device
    assert res["item_waits"] == 0 and res["item_wait_ms"] == 0.0

    # one Kineto trace with exactly the profiled steps and advisor's phase ranges
    assert len(res["trace_files"]) == 1 and res["trace_files"][0].startswith("tb/baseline/")
    names = _trace_names(run_dir, res["trace_files"][0])
    assert {n for n in names if n.startswith("ProfilerStep#")} == {"ProfilerStep#1", "ProfilerStep#2"}
    for phase in ("data", "forward", "backward", "zero_grad", "optimizer"):
        assert f"advisor::{phase}" in names, phase

    cfg = res["config"]
    site = lambda needle: f"train.py:{line_of(script, needle)}"  # noqa: E731
    assert cfg["dataloader"]["where"] == site("DataLoader(ds")
    assert cfg["dataloader"]["value"] == {
        "batch_size": 8, "num_workers": 0, "pin_memory": False, "persistent_workers": False,
        "prefetch_factor": None, "dataset_type": "TensorDataset", "transforms": None,
        "dali": {"why_not": "TensorDataset holds no list of image paths with integer labels that __getitem__ reads"}}
    assert cfg["optimizer"] == {"value": {"class": "SGD", "foreach": None, "fused": None, "lr": 0.05},
                                "where": site("optim.SGD(")}
    assert cfg["cudnn.benchmark"] == {"value": True, "where": site("cudnn.benchmark = True")}
    assert cfg["cudnn.deterministic"] == {"value": False, "where": None}
    assert cfg["deterministic_algorithms"] == {"value": False, "where": None}
    assert cfg["float32_matmul_precision"] == {"value": "high",
                                               "where": site("set_float32_matmul_precision")}
    assert cfg["zero_grad"] == {"value": {"set_to_none": True}, "where": site("zero_grad(set_to_none")}
    assert cfg["autocast"]["value"] == {"enabled": False, "dtype": "bfloat16", "device_type": "cpu"}
    assert cfg["autocast"]["where"] == site("torch.autocast(")
    assert cfg["grad_scaler"] == {"value": {"enabled": False}, "where": site("GradScaler(")}
    assert cfg["input"] == {"value": {"dtype": "float32", "shape": [8, 8], "memory_format": "contiguous",
                                      "device": "cpu"}, "where": site("out = model(x)")}
    assert cfg["parameters"]["value"] == {"dtype": "float32", "conv_memory_format": None,
                                          "count": 8 * 16 + 16 + 16 + 1, "device": "cpu"}
    env = res["environment"]
    assert env["python"] and env["torch"] and env["cpu_count"] >= 1
    assert isinstance(env["gpu_count"], int)
    assert res["memory"]["max_allocated_bytes"] is None  # the script never used CUDA

    # progress: every step reported, stages in order
    steps = [(s, n) for s, n in progress if s in ("warmup", "profile", "measure")]
    assert steps == [("warmup", 1), ("warmup", 2)] + [("measure", n) for n in range(3, 8)] + \
        [("profile", 8), ("profile", 9), ("profile", 10)]
    assert progress[0] == ("started", 0) and progress[-1] == ("done", 10)

    # the run dir keeps the documents
    child = json.load(open(os.path.join(run_dir, "child.json")))
    assert child["stage"] == "measured" and child["steps_seen"] == 10
    assert json.load(open(os.path.join(run_dir, "spec.json")))["argv"] == ["train.py", "--lr", "1"]


def test_losses_are_read_back_in_one_copy_without_item(monkeypatch):
    """The runner reads its recorded losses with one host copy a device, never through
    Tensor.item: the .item() calls it times in a window are the script's only (else a window
    of 240 steps on an H100 books 241 of the runner's own reads as the script's waits)."""
    import torch

    from advisor.runner.losses import read_losses

    def forbidden(self):
        raise AssertionError("the runner read a loss through Tensor.item")

    refs = [torch.tensor(0.5), None, 1.25, torch.tensor([2.0], dtype=torch.bfloat16),
            torch.tensor(3.0, requires_grad=True) * 1, torch.tensor(float("nan"))]
    monkeypatch.setattr(torch.Tensor, "item", forbidden)
    read_losses(refs)
    assert refs[:5] == [0.5, None, 1.25, 2.0, 3.0] and math.isnan(refs[5])
    assert all(not isinstance(v, torch.Tensor) for v in refs)
    read_losses(refs)  # read already: left as they are
    assert refs[:5] == [0.5, None, 1.25, 2.0, 3.0]


def test_advisor_step_without_optimizer(tmp_path, capfd):
    script = write(tmp_path / "manual.py", """
        import torch, advisor
        w = torch.zeros(4, requires_grad=True)
        x, y = torch.randn(64, 4), torch.randn(64)
        for i in range(10000):
            loss = ((x @ w - y) ** 2).mean()
            loss.backward()
            with torch.no_grad():
                w -= 0.01 * w.grad
                w.grad = None
            advisor.step()
        print("never printed")
    """)
    res, out, err, _ = run_advised(capfd, script, ["manual.py"], str(tmp_path), str(tmp_path / "run"),
                                   warmup_steps=1, profile_steps=1, measure_steps=3)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["step_source"] == "advisor.step"
    assert res["steps_seen"] == 6 and len(res["step_times_ms"]) == 3
    assert all(math.isfinite(x) for x in res["losses"]) and len(res["losses"]) == 6
    assert res["batch_size"] is None  # no DataLoader, no module
    assert "never printed" not in out
    assert res["exit"]["code"] == 0


def test_measure_window_lasts_min_time_up_to_cap_times_the_steps(tmp_path, capfd):
    script = write(tmp_path / "sleepy.py", """
        import time, torch
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(10000):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            time.sleep(0.05 if i < 12 else 0.2)
    """)
    # 3 steps asked, 0.3 s at least: the steps (each holds a 50 ms sleep, so at most 6 fill
    # 0.3 s) run on past 3 until 0.3 s, and the window closes at the first step that reaches it.
    # How many that is depends on the machine's load: the count on a fixed clock is
    # test_the_window_grows_to_min_time_up_to_cap_times_the_steps_on_a_fake_clock.
    res, *_ = run_advised(capfd, script, ["sleepy.py"], str(tmp_path), str(tmp_path / "a"),
                          warmup_steps=1, profile_steps=1, measure_steps=3, measure_min_s=0.3)
    assert res["status"] == "complete", res["incomplete_reasons"]
    n = len(res["step_times_ms"])
    assert 3 <= n <= 6, res["step_times_ms"]
    assert n == 3 or sum(res["step_times_ms"][:-1]) < 300, res["step_times_ms"]  # no step past 0.3 s
    assert res["measure_window_ms"] >= 300 and res["step_timing"] == "window"
    assert abs(sum(res["step_times_ms"]) - res["measure_window_ms"]) < 1.0  # the steps tile the window
    assert res["steps_seen"] == 1 + n + 2
    # a long min time stops at CAP x the steps asked
    res, *_ = run_advised(capfd, script, ["sleepy.py"], str(tmp_path), str(tmp_path / "b"),
                          warmup_steps=1, profile_steps=1, measure_steps=2, measure_min_s=60)
    assert res["status"] == "complete" and len(res["step_times_ms"]) == 2 * CAP


class _Clock:
    """A perf_counter that moves only when told (binary fractions of a second: sums are exact)."""

    def __init__(self, t: float = 1024.0):
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


def _steps_until_closed(window, clock, step_s: float, limit: int = 1000) -> int:
    for n in range(1, limit + 1):
        clock.advance(step_s)
        if window.step(0.0):
            return n
    raise AssertionError(f"the window did not close in {limit} steps")


def test_the_window_grows_to_min_time_up_to_cap_times_the_steps_on_a_fake_clock(monkeypatch):
    """runner/window.py on an injected clock: the window closes at the first step that
    reaches min_s, never before the steps asked, never past CAP times them."""
    from advisor.runner import window

    clock = _Clock()
    monkeypatch.setattr(window, "perf_counter", clock)
    w = window.Window(3, 0.3)
    w.start()
    # 62.5 ms steps: 0.25 s after 4, 0.3125 s after 5
    assert _steps_until_closed(w, clock, 0.0625) == 5
    assert w.step_times_ms == [62.5] * 5 and w.window_ms == 312.5 and w.data_wait_ms == [0.0] * 5
    w = window.Window(3, 0.3)
    w.start()
    assert _steps_until_closed(w, clock, 0.5) == 3  # slow steps: the steps asked, past min_s
    w = window.Window(2, 60)
    w.start()
    assert _steps_until_closed(w, clock, 0.0625) == 2 * CAP  # 1.25 s of a 60 s min time: the cap


def test_a_window_of_long_steps_closes_once_its_mean_is_known_on_a_fake_clock(monkeypatch):
    """Long steps that repeat closely close the window at MIN_KEPT steps once min_s has passed
    (0.5 s steps: 8 of the 20 asked); steps whose blocks spread run to the steps asked; short
    steps still fill min_s."""
    from advisor.runner import window

    clock = _Clock()
    monkeypatch.setattr(window, "perf_counter", clock)
    w = window.Window(20, 1.0)
    w.start()
    assert _steps_until_closed(w, clock, 0.5) == window.MIN_KEPT and w.closed_by == "precise"
    w = window.Window(20, 1.0)
    w.start()
    for k in range(1, 21):   # steps that slow down: no two blocks alike
        clock.advance(0.2 + 0.05 * k)
        if w.step(0.0):
            break
    assert k == 20 and w.closed_by == "steps"
    w = window.Window(3, 0.3)
    w.start()
    assert _steps_until_closed(w, clock, 0.0625) == 5 and w.closed_by == "min_time"
    assert window.known([10.0] * 8) and not window.known([10.0, 10.0, 12.0, 12.0] * 2)


def test_a_window_of_steps_too_long_for_the_budget_closes_at_its_share_on_a_fake_clock(monkeypatch):
    """Steps of about 10 s that drift (a CPU step on a loaded host): the 20 asked would take
    most of a 240 s budget. With max_s 36 s (specs.window_cap_s) the window closes after 5 steps
    (47.5 s: at 37 s it held 4, fewer than BY_TIME_MIN); without a cap it runs to the 20 asked;
    a --min-time above the cap is kept; steps whose mean is known close as before."""
    from advisor import specs
    from advisor.runner import window

    clock = _Clock()
    monkeypatch.setattr(window, "perf_counter", clock)

    def spread(w, n=20):
        w.start()
        for k in range(1, n + 1):
            clock.advance(8.0 + 0.5 * k)   # 8.5 s, 9 s, ...: slowing, no precise mean
            if w.step(0.0):
                return k
        return None

    assert spread(window.Window(20, 1.0, max_s=specs.window_cap_s(240.0))) == window.BY_TIME_MIN
    w = window.Window(20, 1.0, max_s=36.0)
    spread(w)
    assert w.closed_by == "budget"
    w = window.Window(20, 1.0)
    assert spread(w) == 20 and w.closed_by == "steps"
    w = window.Window(20, 80.0, max_s=36.0)   # --min-time 80 asks for more: it is kept
    assert spread(w) == 8 and w.closed_by == "budget"
    w = window.Window(20, 1.0, max_s=36.0)
    w.start()
    assert _steps_until_closed(w, clock, 0.5) == window.MIN_KEPT and w.closed_by == "precise"


def test_an_evaluation_pass_is_taken_out_of_the_step_it_fell_in_on_a_fake_clock(monkeypatch):
    """runner/oneoffs.py and runner/window.py on an injected clock: .eval() on the trained
    model to its .train() is an evaluation pass, taken out of the step it fell in (the step
    kept); a module inside it put in eval mode (a frozen BatchNorm) is not."""
    import torch

    from advisor.runner import oneoffs, window

    clock = _Clock()
    monkeypatch.setattr(window, "perf_counter", clock)
    monkeypatch.setattr(oneoffs, "perf_counter", clock)

    class Patcher:  # what runner/hooks.py hands patch_train: set an attribute, undone after
        def set(self, obj, name, value):
            monkeypatch.setattr(obj, name, value)

    commits = []
    seen = oneoffs.OneOffs()
    seen.patch_train(Patcher(), lambda: commits.append(clock()))
    model = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.BatchNorm1d(4))
    seen.trained(model)
    w = window.Window(4, 0.0, seen)
    w.start()
    clock.advance(0.015625)
    assert not w.step(0.0)
    clock.advance(0.0078125)              # the step's training work
    model[1].eval()                       # a frozen BatchNorm: no pass
    assert not seen.evaluating()
    model.eval()                          # the pass begins: the step boundary is committed first
    assert seen.evaluating() and commits == [clock.t]
    clock.advance(0.25)
    model.train()                         # ... and ends
    assert not seen.evaluating()
    clock.advance(0.0078125)
    assert not w.step(0.0)
    clock.advance(0.015625)
    assert not w.step(0.0)
    clock.advance(0.015625)
    assert w.step(0.0)
    assert w.left_out == {"evaluation": 1} and w.left_out_ms == 250.0
    assert w.step_times_ms == [15.625] * 4 and w.window_ms == 62.5  # the pass in no step; they tile the window


def test_measure_window_spans_whole_epochs(tmp_path, capfd):
    script = write(tmp_path / "epochs.py", """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        loader = DataLoader(TensorDataset(torch.randn(40, 2)), batch_size=8)  # 5 batches an epoch
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(1000):
            for (x,) in loader:
                model(x).sum().backward()
                opt.step()
                opt.zero_grad()
    """)
    # 6 steps asked: the window grows to two whole epochs (10 steps), wherever it starts
    res, *_ = run_advised(capfd, script, ["epochs.py"], str(tmp_path), str(tmp_path / "a"),
                          warmup_steps=2, profile_steps=1, measure_steps=6, measure_min_s=0)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["batches_per_epoch"] == 5 and len(res["step_times_ms"]) == 10
    # a long min time: whole epochs still, up to max(CAP x the steps, 2 epochs)
    res, *_ = run_advised(capfd, script, ["epochs.py"], str(tmp_path), str(tmp_path / "b"),
                          warmup_steps=2, profile_steps=1, measure_steps=6, measure_min_s=60)
    assert res["status"] == "complete" and len(res["step_times_ms"]) == 6 * CAP // 5 * 5
    # an epoch longer than the steps asked: not aligned (a one-epoch script must not be outrun)
    res, *_ = run_advised(capfd, script, ["epochs.py"], str(tmp_path), str(tmp_path / "c"),
                          warmup_steps=2, profile_steps=1, measure_steps=3, measure_min_s=0)
    assert res["status"] == "complete" and len(res["step_times_ms"]) == 3


def test_default_settings_profile_a_one_epoch_script(tmp_path):
    """The CPU quick start: cifar_resnet.py runs one 40-step epoch on a CPU; with advisor's
    default settings the window must leave steps to profile (a whole-epoch window did not)."""
    import subprocess
    import sys

    from test_runner_support import REPO
    env = dict(os.environ, PYTHONPATH=REPO)
    r = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--no-trials", "--out", str(tmp_path / "run"),
                        os.path.join(REPO, "examples", "cifar_resnet.py"), "--device", "cpu"],
                       cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["status"] == "complete" and doc["traces"]["baseline"]


def test_compiled_model_is_not_recompiled_when_the_window_opens(tmp_path, capfd):
    """advisor's loop hooks are switched off for the timed steps. torch.compile guards on
    global module hooks, so taking them away recompiles a compiled model (on an H100, an
    808 ms step inside a window of 4 ms steps; 1.5-14 s a process); for a compiled model
    they stay in place, switched off: one compile, one settle step."""
    script = write(tmp_path / "compiled.py", f"""
        import torch
        from torch._dynamo.utils import counters
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        model.compile()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(32, 16)
        for i in range(10000):
            model(x).sum().backward()
            opt.step()
            opt.zero_grad()
            with open({str(tmp_path / 'graphs.txt')!r}, "a") as f:  # the child exits without atexit
                f.write(str(counters["stats"]["unique_graphs"]) + "\\n")  # after each step
    """)
    res, *_ = run_advised(capfd, script, ["compiled.py"], str(tmp_path), str(tmp_path / "run"), timeout=300,
                          step_timeout=STEP_GUARD, warmup_steps=2, profile_steps=1, measure_steps=6, measure_min_s=0)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["settle_steps"] == 1
    assert len(res["step_times_ms"]) == 6
    assert res["steps_seen"] == 2 + 1 + 6 + (1 + 1) + 1
    # the profiled steps still see the phases (the hooks came back on)
    assert res["trace_files"]
    # the untimed steps: 2 warm-up + 1 settle; the compile is in the first (model.compile()
    # compiles at the first call), and nothing recompiled after it: torch.compile's own graph
    # count after each step, and no step of the window left out as a compile (runner/oneoffs.py)
    assert len(res["warmup_step_times_ms"]) == 2 + 1
    graphs = (tmp_path / "graphs.txt").read_text().split()
    assert len(graphs) >= res["steps_seen"] - 1 and set(graphs) == {"1"}, graphs
    assert res["left_out_steps"] == {}


def test_item_inside_a_compiled_function_is_not_recompiled_when_the_window_opens(tmp_path, capfd):
    """advisor wraps .item() (the timed window's waits, the loop's call sites): traced by
    torch.compile, the wrappers read no state of advisor's, so opening the window (a state
    change) recompiles nothing; the .item() itself splits the graph, as it would in python."""
    script = write(tmp_path / "compiled_item.py", f"""
        import torch
        from torch._dynamo.utils import counters
        model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)

        @torch.compile
        def loss_of(x):
            loss = model(x).pow(2).mean()
            scale = 1.0 if loss.item() < 1e9 else 0.5   # a host read inside compiled code
            return loss * scale

        x = torch.randn(32, 16)
        for i in range(10000):
            loss_of(x).backward()
            opt.step()
            opt.zero_grad()
            with open({str(tmp_path / 'graphs.txt')!r}, "w") as f:
                f.write(str(counters["stats"]["unique_graphs"]))
    """)
    res, *_ = run_advised(capfd, script, ["compiled_item.py"], str(tmp_path), str(tmp_path / "run"), timeout=300,
                          step_timeout=STEP_GUARD, warmup_steps=2, profile_steps=1, measure_steps=6, measure_min_s=0)
    assert res["status"] == "complete", res["incomplete_reasons"]
    graphs = int((tmp_path / "graphs.txt").read_text())
    plain = subprocess.run([sys.executable, "-c", _graphs_in_plain_python(script)], capture_output=True, text=True,
                           timeout=300, cwd=str(tmp_path))
    assert graphs == int(plain.stdout.strip()), (graphs, plain.stdout, plain.stderr[-2000:])


def _graphs_in_plain_python(script) -> str:
    """The script's loop for 12 steps as plain python, printing torch.compile's graph count."""
    body = open(script).read().replace("range(10000)", "range(12)")
    return body + "\nprint(counters['stats']['unique_graphs'])\n"


def test_advisor_step_is_noop_outside_advisor(tmp_path):
    import subprocess
    import sys

    from test_runner_support import REPO

    p = subprocess.run([sys.executable, "-c", "import advisor; advisor.step(); advisor.step(); print('ok')"],
                       capture_output=True, text=True, cwd=str(tmp_path),
                       env={**os.environ, "PYTHONPATH": REPO})
    assert p.returncode == 0 and p.stdout == "ok\n"
    assert "torch" not in p.stderr


def test_scripts_own_profiler_disarmed(tmp_path, capfd):
    script = write(tmp_path / "prof.py", """
        import torch
        from torch.profiler import profile, ProfilerActivity
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
            for i in range(3):
                model(torch.randn(2, 4)).sum().backward()
                opt.step()
                opt.zero_grad()
                prof.step()
        print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=5))
        prof.export_chrome_trace("mine.json")
        with torch.autograd.profiler.profile() as p2:
            torch.randn(3).sum()
        print("events", len(p2.key_averages()))
        for i in range(1000):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
    """)
    res, out, err, _ = run_advised(capfd, script, ["prof.py"], str(tmp_path), str(tmp_path / "run"))
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["config"]["optimizer"]["value"]["class"] == "Adam"
    assert res["batch_size"] == 2 and res["batch_size_source"] == "model-input"
    site = line_of(script, "with profile(")
    assert f"disarmed the script's torch.profiler.profile (prof.py:{site}): it would collide " \
           "with advisor's" in res["notes"]
    site2 = line_of(script, "torch.autograd.profiler.profile()")
    assert any(n.startswith(f"disarmed the script's torch.autograd.profiler.profile (prof.py:{site2})")
               for n in res["notes"])
    assert "events 0" in out
    assert not os.path.exists(tmp_path / "mine.json")
    assert len(res["trace_files"]) == 1  # advisor's own profiler still worked


def test_gan_two_optimizers_one_step_per_iteration(tmp_path, capfd):
    script = write(tmp_path / "gan.py", """
        import torch
        G, D = torch.nn.Linear(2, 2), torch.nn.Linear(2, 1)
        og = torch.optim.SGD(G.parameters(), lr=0.01)
        od = torch.optim.SGD(D.parameters(), lr=0.01)
        n = 0
        for i in range(1000):
            n += 1
            od.zero_grad(); D(G(torch.randn(4, 2)).detach()).mean().backward(); od.step()
            og.zero_grad(); (-D(G(torch.randn(4, 2)))).mean().backward(); og.step()
            print("iter", n, flush=True)
    """)
    res, out, err, _ = run_advised(capfd, script, ["gan.py"], str(tmp_path), str(tmp_path / "run"),
                                   warmup_steps=1, profile_steps=1, measure_steps=2)
    assert res["status"] == "complete"
    assert res["steps_seen"] == 5  # 1 warmup + 2 timed + profiler warmup + 1 profiled
    # the 5th step ends when od (the first optimizer) steps for the 5th time
    assert out.splitlines()[-1] == "iter 4"


def test_trial_spec_interventions_tb_dir_seed(tmp_path, capfd):
    """What trials pass: interventions (applied before the script, under advisor's hooks),
    tb_dir shared with the main run (trace_files relative to its parent), a seed."""
    script = train_script(tmp_path / "train.py")
    main = tmp_path / "main"
    res, out, err, _ = run_advised(
        capfd, script, ["train.py"], str(tmp_path), str(main / "trials" / "t1"), run_name="t1",
        tb_dir=str(main / "tb"), seed=0, warmup_steps=2, profile_steps=1, measure_steps=2,
        interventions=[{"name": "set-to-none", "params": {}}, {"name": "cudnn-benchmark", "params": {}},
                       {"name": "no-such-fix", "params": {}}])
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["interventions_applied"] == ["zero_grad(set_to_none=True)",
                                            "torch.backends.cudnn.benchmark = True"]
    assert any(n.startswith("intervention 'no-such-fix' failed to apply: KeyError") for n in res["notes"])
    assert len(res["trace_files"]) == 1 and res["trace_files"][0].startswith("tb/t1/")
    assert os.path.exists(main / res["trace_files"][0])
    assert len(res["warmup_step_times_ms"]) == 2 and len(res["step_times_ms"]) == 2
    assert res["config"]["zero_grad"]["value"] == {"set_to_none": True}


def test_script_ending_inside_a_grown_window_keeps_the_steps_asked(tmp_path, capfd):
    script = write(tmp_path / "short.py", """
        import time, torch
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(14):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            time.sleep(0.01)
        print("evaluated and saved")
    """)
    # 2 warmup + 4 steps asked, the window grows towards 60 s: the script ends after 14 steps
    res, *_ = run_advised(capfd, script, ["short.py"], str(tmp_path), str(tmp_path / "run"),
                          warmup_steps=2, profile_steps=2, measure_steps=4, measure_min_s=60)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert len(res["step_times_ms"]) == 12 and res["measure_window_ms"] == pytest.approx(sum(res["step_times_ms"]), rel=1e-3)
    assert any("ended inside the timed window after 12 timed steps" in n for n in res["notes"])
    assert not res["trace_files"]
    # fewer steps than asked, at least MIN_TIMED: kept, and said (advisor.schedule profiles it apart)
    res, *_ = run_advised(capfd, script, ["short.py"], str(tmp_path), str(tmp_path / "run2"),
                          warmup_steps=2, profile_steps=2, measure_steps=20, measure_min_s=0)
    assert res["status"] == "complete" and len(res["step_times_ms"]) == 12
    assert any("after 12 timed steps (of 20 asked)" in n for n in res["notes"])
    # fewer than MIN_TIMED: incomplete (advisor.schedule times it in a run of its own)
    res, *_ = run_advised(capfd, script, ["short.py"], str(tmp_path), str(tmp_path / "run3"),
                          warmup_steps=12, profile_steps=2, measure_steps=20, measure_min_s=0)
    assert res["status"] == "incomplete" and "fewer than" in res["incomplete_reasons"][0]


def test_the_loader_that_feeds_the_first_step_is_the_training_loader(tmp_path, capfd):
    """A validation pass before training draws the first batch from another loader: the batch
    size, the epoch length and the DataLoader config come from the one the steps consume."""
    script = write(tmp_path / "valfirst.py", """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        val = DataLoader(TensorDataset(torch.randn(15, 2)), batch_size=5)           # 3 batches
        train = DataLoader(TensorDataset(torch.randn(40, 2)), batch_size=8, shuffle=True)  # 5 an epoch
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        with torch.no_grad():
            for (x,) in val:
                model(x)
        for epoch in range(1000):
            for (x,) in train:
                model(x).sum().backward()
                opt.step()
                opt.zero_grad()
    """)
    res, *_ = run_advised(capfd, script, ["valfirst.py"], str(tmp_path), str(tmp_path / "run"),
                          warmup_steps=2, profile_steps=1, measure_steps=5, measure_min_s=0)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["batch_size"] == 8 and res["batch_size_source"] == "dataloader"
    assert res["batches_per_epoch"] == 5 and len(res["step_times_ms"]) == 5
    assert res["config"]["dataloader"]["value"]["batch_size"] == 8


def _torch_loaded(pid: int) -> bool:
    """torch's C extension is mapped in process pid (its import is done or under way)."""
    try:
        with open(f"/proc/{pid}/maps") as f:
            return "libtorch_python" in f.read()
    except OSError:
        return False


def test_a_process_started_ahead_runs_the_script_as_a_fresh_one(tmp_path, capfd):
    """Trials start the next process while one runs (python and torch imported, then it
    waits for its spec): it runs the script with the same argv, __main__ and result.
    How much start-up that saves is a figure (benchmarks/warm_start.py), not asserted here."""
    from test_runner_support import spec_for

    from advisor.runner.ahead import WarmChild
    from advisor.runner.parent import run_child

    script = write(tmp_path / "train.py", """
        import os, sys, torch
        print("argv", sys.argv[1:], __name__, flush=True)
        print("pid", os.getpid(), flush=True)
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(10000):
            model(torch.randn(8, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
    """)
    results = []
    ahead = WarmChild(str(tmp_path))  # imports torch while the first process runs
    for warm in (None, ahead):
        spec = spec_for(script, ["train.py", "--x", "1"], str(tmp_path), str(tmp_path / f"run{len(results)}"),
                        warmup_steps=2, profile_steps=1, measure_steps=3)
        if warm is not None:  # started ahead, torch was imported before the go
            wait_until(lambda: _torch_loaded(ahead.proc.pid), "torch loaded in the process started ahead")
        results.append(run_child(spec, timeout=120, step_timeout=60, warm=warm))
    cold, warm_res = results
    assert cold["status"] == warm_res["status"] == "complete", (cold["incomplete_reasons"], warm_res["incomplete_reasons"])
    assert (cold["started_warm"], warm_res["started_warm"]) == (False, True)
    assert cold["steps_seen"] == warm_res["steps_seen"]
    out = capfd.readouterr().out
    assert out.count("argv ['--x', '1'] __main__") == 2
    pids = [int(line.split()[1]) for line in out.splitlines() if line.startswith("pid ")]
    assert len(pids) == 2 and pids[1] == ahead.proc.pid != pids[0]  # the script ran in the process started ahead
    # the start-up milestones, in order
    from advisor.measure import startup_s

    for res in results:
        phases = startup_s(res)
        assert list(phases) == ["install", "script", "first_step"], phases  # no CUDA used
        assert 0 <= phases["install"] <= phases["script"] <= phases["first_step"], phases

    spare = WarmChild(str(tmp_path))  # started for a process that never comes: closed, gone
    spare.close()
    assert spare.proc.poll() is not None and not os.path.exists(spare.fifo_dir)


@pytest.mark.parametrize("killed_after_s", [3.0, 0.0])
def test_a_process_started_ahead_ends_when_advisor_is_gone(tmp_path, killed_after_s):
    """Killed advisor: the process it started ahead does not wait for a spec forever, also
    when advisor was gone before that process got to wait (killed while it imported torch:
    it was reparented then, and took its new parent for advisor; such processes stayed)."""
    import subprocess
    import sys
    import time

    from test_runner_support import REPO

    code = ("import sys, time; sys.path.insert(0, %r)\n"
            "from advisor.runner.ahead import WarmChild\n"
            "w = WarmChild(%r); print(w.proc.pid, flush=True); time.sleep(60)\n") % (REPO, str(tmp_path))
    advisor_proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pid = int(advisor_proc.stdout.readline())
    time.sleep(killed_after_s)          # 3 s: it imports torch and waits on its FIFO; 0: still importing
    advisor_proc.kill()
    advisor_proc.wait()

    def gone() -> bool:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as f:  # reaped by init, or a zombie of nobody
                return f.read().split()[2] == "Z"
        except (ProcessLookupError, FileNotFoundError):
            return True

    # it ends by itself (it looks for advisor every second once torch is imported); the
    # guard only keeps a process that never ends from hanging the suite
    try:
        wait_until(gone, "the process started ahead outlived advisor")
    finally:
        if not gone():
            os.kill(pid, 9)


GUESSED = """
    import sys, time, torch
    print("making data", flush=True)
    time.sleep(0.5)                       # the script's own start-up, done while held back
    open("made.txt", "w").write("x")      # a write before the hold: redirected, then moved
    if "--no-cuda" not in sys.argv:
        try:
            torch.cuda.init()             # its first CUDA use: where a guess waits
        except Exception as e:            # a CPU-only torch raises; the hold came first
            print("cuda:", type(e).__name__, flush=True)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(10000):
        model(torch.randn(8, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        if "--no-cuda" in sys.argv:
            time.sleep(0.2)               # slow enough to be seen training before it ends
"""


def _guess_spec(tmp_path, script, name, argv=()):
    from test_runner_support import spec_for

    return spec_for(script, ["train.py", *argv], str(tmp_path), str(tmp_path / "trials" / name), warmup_steps=2,
                    profile_steps=1, measure_steps=3, run_name=name, tb_dir=str(tmp_path / "tb"), sandbox_writes=True)


def test_a_guessed_process_waits_at_its_first_cuda_use_and_takes_the_trials_place(tmp_path, capfd):
    """advisor.trials.lookahead: a process started on a guess of the next trial runs the script up to
    its first CUDA use and waits; released, it runs on under the trial's name and directory
    (its trace, its redirected writes, child.json there) exactly as a fresh process would."""
    from advisor.measure import startup_s
    from advisor.runner.ahead import HeldChild, WarmChild
    from advisor.runner.parent import run_child

    script = write(tmp_path / "train.py", GUESSED)
    spec = _guess_spec(tmp_path, script, "03-fix")
    held = HeldChild(spec, str(tmp_path / "trials" / ".ahead-1"), WarmChild(str(tmp_path)))
    wait_until(lambda: held.at_hold() or not held.alive(), "the guess held or ended")
    assert held.held and held.alive()
    from advisor.runner.ahead import AHEAD_NICE

    assert os.getpriority(os.PRIO_PROCESS, held.proc.pid) == AHEAD_NICE  # on the cores left idle
    # stopped like any guess while another process times its steps: waiting itself, its
    # DataLoader workers may still be filling their queues; the release resumes it
    held.pause()
    assert held.paused
    assert not (tmp_path / "trials" / "03-fix").exists()
    res = run_child(spec, timeout=120, step_timeout=60, held=held)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["started_held"] and res["steps_seen"] >= 6
    phases = startup_s(res)  # from the release: what came before it is negative
    assert phases["script"] < phases["held"] < 0 <= phases["released"] <= phases["cuda_init"] <= phases["first_step"], phases
    assert os.listdir(tmp_path / "trials") == ["03-fix"]
    trial = tmp_path / "trials" / "03-fix"
    assert json.loads((trial / "spec.json").read_text())["run_dir"] == str(trial)
    assert res["trace_files"] and all(t.startswith("tb/03-fix/") for t in res["trace_files"])
    assert (tmp_path / res["trace_files"][0]).is_file()
    assert not (tmp_path / "made.txt").exists()
    assert [p for p in trial.rglob("made.txt")]  # the pre-hold write moved with its directory
    assert capfd.readouterr().out.count("making data") == 1


def test_a_wrong_guess_is_dropped_and_one_that_never_waits_is_not_used(tmp_path):
    """A guess that was not the next trial is killed with its directory; a script that trains
    before any CUDA use has nowhere to wait: its guess is stopped as soon as it is seen
    training, and the trial starts fresh."""
    import time

    from advisor.runner.ahead import HeldChild
    from advisor.runner.parent import run_child

    script = write(tmp_path / "train.py", GUESSED)
    wrong = HeldChild(_guess_spec(tmp_path, script, "04-a"), str(tmp_path / "trials" / ".ahead-1"))
    time.sleep(1.0)
    wrong.close()
    assert wrong.proc.poll() is not None and not (tmp_path / "trials" / ".ahead-1").exists()

    spec = _guess_spec(tmp_path, script, "05-b", ["--no-cuda"])
    runaway = HeldChild(spec, str(tmp_path / "trials" / ".ahead-2"))

    def stopped() -> bool:
        runaway.at_hold()  # reads its progress: seen training, it is stopped
        return not runaway.alive()

    wait_until(stopped, "the guess that never waits stopped")
    assert runaway.runaway and runaway.proc.poll() is not None and not runaway.held
    res = run_child(spec, timeout=120, step_timeout=60, held=runaway)
    assert res["status"] == "complete" and not res["started_held"], res["incomplete_reasons"]
    assert sorted(os.listdir(tmp_path / "trials")) == ["05-b"]


def test_a_guess_may_warm_up_before_it_waits(tmp_path):
    """hold_at "warmup": the guess runs its first warm-up steps (on a GPU host: CUDA, compile,
    CUDA graphs) and waits before the last two; released, it finishes its warm-up and is timed.
    The wait is in no step's time."""
    import time

    from advisor.measure import startup_s
    from advisor.runner.ahead import HeldChild
    from advisor.runner.parent import run_child

    script = write(tmp_path / "train.py", GUESSED)
    spec = _guess_spec(tmp_path, script, "06-c", ["--no-cuda"])
    spec["warmup_steps"] = 4
    held = HeldChild(spec, str(tmp_path / "trials" / ".ahead-1"), hold_at="warmup")
    wait_until(lambda: held.at_hold() or not held.alive(), "the guess held or ended")
    assert held.held and not held.runaway
    progress = (tmp_path / "trials" / ".ahead-1" / "progress.jsonl").read_text()
    assert '"stage": "warmup", "step": 2' in progress and '"step": 3' not in progress  # 4 - 2
    time.sleep(1.0)  # waiting: in no step's time
    res = run_child(spec, timeout=120, step_timeout=60, held=held)
    assert res["status"] == "complete" and res["started_held"], res["incomplete_reasons"]
    assert startup_s(res)["first_step"] < 0 < startup_s(res)["released"] + 0.5
    # the wait, held to released as the process noted them (over 1 s), is in none of the steps
    # after the first (which holds the script's start-up): the step it fell between would
    # be longer than the wait alone
    waited_ms = (res["startup"]["released"] - res["startup"]["held"]) * 1e3
    assert waited_ms >= 1000 and max(res["warmup_step_times_ms"][1:]) < waited_ms, (waited_ms, res["warmup_step_times_ms"])


def test_a_guess_held_at_its_first_cuda_use_can_be_advanced_into_its_warm_up(tmp_path):
    """Held at its first CUDA use (the GPU had no room for it), a guess is told later to go on
    into its warm-up (advisor.trials.lookahead, when a guess made earlier is guessed again): it waits
    again before its last two warm-up steps, and runs on when released."""
    from advisor.runner.ahead import HeldChild
    from advisor.runner.parent import run_child

    script = write(tmp_path / "train.py", GUESSED)
    spec = _guess_spec(tmp_path, script, "07-d")
    spec["warmup_steps"] = 4
    held = HeldChild(spec, str(tmp_path / "trials" / ".ahead-1"))
    wait_until(lambda: held.at_hold() or not held.alive(), "the guess held or ended")
    progress = tmp_path / "trials" / ".ahead-1" / "progress.jsonl"
    assert held.held and '"warmup"' not in progress.read_text()  # at the CUDA use: no step yet
    assert held.advance() and held.hold_at == "warmup" and not held.held
    wait_until(lambda: held.at_hold() or not held.alive(), "the advanced guess held again or ended")
    assert held.held and not held.runaway
    text = progress.read_text()
    assert '"stage": "warmup", "step": 2' in text and '"step": 3' not in text and text.count('"held"') == 2
    res = run_child(spec, timeout=120, step_timeout=60, held=held)
    assert res["status"] == "complete" and res["started_held"], res["incomplete_reasons"]
    assert "advanced" in res["startup"]


@pytest.mark.parametrize("loop, micro", [
    # nanoGPT: no DataLoader; 3 micro-batches per optimizer step; an evaluation now and then
    ("""
        for it in range(1000):
            if it % 4 == 3:
                with torch.no_grad():
                    model(torch.randn(4, 2))
            for _ in range(3):
                (model(torch.randn(4, 2)).square().mean() / 3).backward()
            opt.step(); opt.zero_grad()
     """, 3),
    # a DataLoader's batches, 2 per optimizer step
    ("""
        dl = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(4000, 2)), batch_size=4)
        it = iter(dl)
        for _ in range(1000):
            for _ in range(2):
                (x,) = next(it)
                model(x).square().mean().backward()
            opt.step(); opt.zero_grad()
     """, 2),
    # a siamese pair: two forwards, one loss
    ("""
        for _ in range(1000):
            (model(torch.randn(4, 2)) - model(torch.randn(4, 2))).square().mean().backward()
            opt.step(); opt.zero_grad()
     """, 1),
    # a GAN: each optimizer's step follows its own backward
    ("""
        G = torch.nn.Linear(2, 2)
        og = torch.optim.SGD(G.parameters(), lr=0.01)
        for _ in range(1000):
            opt.zero_grad(); model(G(torch.randn(4, 2)).detach()).mean().backward(); opt.step()
            og.zero_grad(); (-model(G(torch.randn(4, 2)))).mean().backward(); og.step()
     """, 1),
], ids=["accumulation", "dataloader-accumulation", "siamese", "gan"])
def test_a_step_counts_the_batches_it_accumulates(tmp_path, capfd, loop, micro):
    """Samples/s counts every batch an optimizer step trains on (gradient accumulation), and
    no more (a siamese model's two forwards feed one loss; a GAN's two steps one batch each)."""
    import textwrap

    from advisor import measure

    script = write(tmp_path / "acc.py", "import torch\nmodel = torch.nn.Linear(2, 1)\n"
                   "opt = torch.optim.SGD(model.parameters(), lr=0.01)\n" + textwrap.dedent(loop))
    res, out, err, _ = run_advised(capfd, script, ["acc.py"], str(tmp_path), str(tmp_path / "run"),
                                   warmup_steps=5, profile_steps=1, measure_steps=3)
    assert res["status"] == "complete", err
    assert res["batch_size"] == 4
    assert measure.micro_batches(res) == micro
    assert measure.samples_per_s(res) == pytest.approx(4 * micro * 1000.0 / measure.step_ms(res))
    # the observed config says so (CUDA graphs cannot apply then: interventions/compile.py)
    accum = res["config"].get("gradient_accumulation")
    assert accum == ({"value": {"micro_batches": micro}, "where": res["config"]["optimizer"]["where"]}
                     if micro > 1 else None)


def test_an_evaluation_pass_is_taken_out_of_the_window(tmp_path, capfd):
    """An evaluation pass (.eval() on the trained model to its .train(), here 0.3 s after every
    7th step) is taken out of the step it fell in, the step kept; a frozen BatchNorm's .eval()
    inside the model every step is not an evaluation, nor is the whole model trained in eval
    mode."""
    script = write(tmp_path / "evals.py", """
        import sys, time, torch
        every, frozen = int(sys.argv[1]), sys.argv[2] == "frozen"
        class Slow(torch.utils.data.Dataset):
            def __len__(self): return 3
            def __getitem__(self, i): time.sleep(0.1); return (torch.randn(2),)
        slow_batches = torch.utils.data.DataLoader(Slow(), batch_size=1)
        model = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(1, 10000):
            model.train()
            model[1].eval()  # a frozen BatchNorm, as fine-tuning scripts keep it
            if frozen:
                model.eval()  # the whole model trained in eval mode
            model(torch.randn(8, 2)).square().mean().backward()
            time.sleep(0.01)
            opt.step(); opt.zero_grad()
            if i % every == 0:
                t0 = time.perf_counter()
                model.eval()
                t1 = time.perf_counter()
                with torch.no_grad():
                    for (x,) in slow_batches:  # the evaluation's own loader: 0.3 s of waits
                        model(x)
                t2 = time.perf_counter()
                model.train()
                t3 = time.perf_counter()
                # the pass as the script times it: inside .eval() to .train(), and around both
                print("evaluation", i, (t2 - t1) * 1e3, (t3 - t0) * 1e3, flush=True)
    """)
    res, out, _err, _ = run_advised(capfd, script, ["evals.py", "7", "-"], str(tmp_path), str(tmp_path / "a"),
                                    warmup_steps=2, profile_steps=1, measure_steps=10)
    assert res["status"] == "complete", res["incomplete_reasons"]
    # the window (steps 3-12) holds the first pass, after step 7: what was left out is that pass,
    # as the script timed it (between its inner and its outer reading), and nothing else
    inner, outer = next(map(float, line.split()[2:]) for line in out.splitlines() if line.startswith("evaluation 7 "))
    assert res["left_out_steps"] == {"evaluation": 1}
    assert inner - 1e-3 <= res["left_out_ms"] <= outer + 1e-3, (inner, res["left_out_ms"], outer)
    # no step holds it (the one it fell in would be longer than the pass alone); each holds a 10 ms sleep
    assert len(res["step_times_ms"]) == 10 and 10 <= max(res["step_times_ms"]) < inner, (res["step_times_ms"], inner)
    assert abs(sum(res["step_times_ms"]) - res["measure_window_ms"]) < 1.0  # the steps tile the window
    assert res["data_wait_ms"] == [0.0] * 10  # no training loader: the evaluation's loader waits are not the steps'
    res, *_ = run_advised(capfd, script, ["evals.py", "10000", "frozen"], str(tmp_path), str(tmp_path / "b"),
                          warmup_steps=2, profile_steps=1, measure_steps=10)
    assert res["status"] == "complete" and res["left_out_steps"] == {}
    assert min(res["step_times_ms"]) >= 10


def test_a_new_batch_size_is_left_out_of_the_window(tmp_path, capfd):
    """A DataLoader batch of a size not seen before (an epoch's short last batch: cudnn.benchmark
    searches again) leaves its step out; a script whose every batch is new is timed as it runs
    (at most 2 + a quarter of the counted steps left out)."""
    script = write(tmp_path / "sizes.py", """
        import sys, torch
        from torch.utils.data import DataLoader, TensorDataset
        n = int(sys.argv[1])
        if n:  # 76 samples in batches of 8: a short last batch of 4 in each epoch (its 10th)
            loader = DataLoader(TensorDataset(torch.randn(n, 2)), batch_size=8)
        else:  # every batch a new size
            loader = DataLoader(TensorDataset(torch.randn(4000, 2)), batch_sampler=[list(range(k)) for k in range(1, 80)])
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(1000):
            for (x,) in loader:
                model(x).square().mean().backward()
                opt.step(); opt.zero_grad()
    """)
    res, *_ = run_advised(capfd, script, ["sizes.py", "76"], str(tmp_path), str(tmp_path / "a"),
                          warmup_steps=2, profile_steps=1, measure_steps=8, measure_min_s=0)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["left_out_steps"] == {"new batch size": 1} and len(res["step_times_ms"]) == 8
    res, *_ = run_advised(capfd, script, ["sizes.py", "0"], str(tmp_path), str(tmp_path / "b"),
                          warmup_steps=2, profile_steps=1, measure_steps=8, measure_min_s=0)
    assert res["status"] == "complete" and res["left_out_steps"] == {"new batch size": 2 + 7 // 4}


def test_a_recompile_in_the_window_is_left_out(tmp_path, capfd):
    """torch.compile compiling a new graph inside the window (an epoch's short last batch) is
    a one-off: that step is left out, the steps around it are timed."""
    script = write(tmp_path / "recompile.py", """
        import torch
        model = torch.nn.Linear(2, 1)
        fast = torch.compile(model, backend="eager", dynamic=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for i in range(1, 10000):
            fast(torch.randn(8 if i != 9 else 5, 2)).square().mean().backward()
            opt.step(); opt.zero_grad()
    """)
    res, *_ = run_advised(capfd, script, ["recompile.py"], str(tmp_path), str(tmp_path / "a"),
                          warmup_steps=3, profile_steps=1, measure_steps=10, timeout=300, step_timeout=STEP_GUARD)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["left_out_steps"] == {"compile": 1}
    assert len(res["step_times_ms"]) == 10


LOOP = """model = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(400):
    loss = model(torch.randn(8, 4)).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
"""


def test_the_scripts_reproducibility_choice_is_observed_with_its_place(tmp_path, capfd):
    """torch.use_deterministic_algorithms(True) and cudnn.benchmark = False written in the script:
    the config says so, with where (Fix.overrides keeps cudnn-benchmark apart for them)."""
    script = write(tmp_path / "det.py", """
import torch
torch.use_deterministic_algorithms(True)
torch.backends.cudnn.benchmark = False
""" + LOOP)
    res, _, _, _ = run_advised(capfd, script, ["det.py"], str(tmp_path), str(tmp_path / "run"))
    cfg = res["config"]
    assert cfg["deterministic_algorithms"] == {"value": True, "where": f"det.py:{line_of(script, 'use_deterministic')}"}
    assert cfg["cudnn.benchmark"] == {"value": False, "where": f"det.py:{line_of(script, 'benchmark = False')}"}
    from advisor import fixes

    assert fixes.get("cudnn-benchmark").overrides(cfg).startswith("torch.use_deterministic_algorithms(True) at det.py:")


def test_the_scripts_precision_choice_is_observed_with_its_place(tmp_path, capfd):
    """allow_tf32 = False and a float64 model written in the script: the config says so, with
    where, and the tf32 and amp fixes name them as what they would override."""
    script = write(tmp_path / "prec.py", """
import torch
torch.backends.cuda.matmul.allow_tf32 = False
torch.set_default_dtype(torch.float64)
""" + LOOP)
    res, _, _, _ = run_advised(capfd, script, ["prec.py"], str(tmp_path), str(tmp_path / "run"))
    cfg = res["config"]
    assert cfg["tf32.matmul"] == {"value": False, "where": f"prec.py:{line_of(script, 'allow_tf32')}"}
    assert cfg["parameters"]["value"]["dtype"] == "float64"
    from advisor import fixes

    assert fixes.get("tf32").overrides(cfg) == f"torch.backends.cuda.matmul.allow_tf32 = False at prec.py:{line_of(script, 'allow_tf32')}"
    assert fixes.get("amp").overrides(cfg).startswith("a float64 model (its first forward at prec.py:")


def test_a_two_model_scripts_compile_edit_goes_on_the_model_the_trial_compiles(tmp_path, capfd):
    """A GAN-shaped loop: the discriminator is called first, each iteration steps two optimizers,
    and the profiled step begins after the discriminator's step, at the generator. The compile
    trial compiles the first model called (the discriminator): config first_model names it, and
    the compile edit goes there, not on the generator the profiled step called first."""
    script = write(tmp_path / "gan.py", """
import torch
gen = torch.nn.Linear(4, 4).to("cpu")
disc = torch.nn.Linear(4, 1).to("cpu")
opt_g = torch.optim.SGD(gen.parameters(), lr=0.01)
opt_d = torch.optim.SGD(disc.parameters(), lr=0.01)
for _ in range(400):
    real = torch.randn(8, 4)
    d_loss = disc(real).mean() - disc(gen(torch.randn(8, 4)).detach()).mean()
    opt_d.zero_grad()
    d_loss.backward()
    opt_d.step()
    g_loss = -disc(gen(torch.randn(8, 4))).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
""")
    res, _, _, _ = run_advised(capfd, script, ["gan.py"], str(tmp_path), str(tmp_path / "run"))
    cfg = res["config"]
    assert cfg["first_model"]["where"] == f"gan.py:{line_of(script, 'disc = ')}"
    from advisor.fixes import make_patch

    diff, notes = make_patch(script, [{"intervention": "torch-compile", "params": {}}], cfg, cwd=str(tmp_path))
    assert notes[0]["applied"], notes
    lines = diff.splitlines()
    assert "+disc.compile()" in lines and "+gen.compile()" not in lines


def test_the_yaml_files_the_script_reads_are_observed(tmp_path, capfd):
    """config_files: the YAML files this run opened (the patch edits those, not a default file)."""
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "run.yaml").write_text("workers: 2\n")
    (tmp_path / "cfg" / "unused.yaml").write_text("workers: 4\n")
    script = write(tmp_path / "y.py", """
import pathlib
import torch
text = open("cfg/run.yaml").read()
pathlib.Path("cfg/run.yaml").read_text()
""" + LOOP)
    res, _, _, _ = run_advised(capfd, script, ["y.py"], str(tmp_path), str(tmp_path / "run"))
    seen = res["config"]["config_files"]
    assert seen["value"] == [os.path.realpath(tmp_path / "cfg" / "run.yaml")]
    assert seen["where"] == f"y.py:{line_of(script, 'open(')}"


def test_a_model_traced_by_tensorboards_add_graph_traces_as_under_plain_python(tmp_path, capfd):
    """TensorBoard's add_graph runs torch.jit.trace, whose check compares two traces: advisor's
    hooks, had they run inside, put their ranges in one of them ("Tracing failed sanity checks!"
    in weiaicunzai/pytorch-cifar100's baseline). They stay out of traced graphs, as of compiled ones."""
    script = write(tmp_path / "train.py", """
        import torch
        from torch.utils.tensorboard import SummaryWriter
        net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Flatten(),
                                  torch.nn.Linear(8 * 6 * 6, 10))
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        writer = SummaryWriter("runs")
        writer.add_graph(net, torch.randn(4, 3, 8, 8))   # the model's first call, as in the script
        for step in range(60):
            x = torch.randn(4, 3, 8, 8)
            torch.nn.functional.cross_entropy(net(x), torch.randint(0, 10, (4,))).backward()
            opt.step(); opt.zero_grad()
    """)
    from test_runner_support import spec_for

    from advisor.runner.parent import run_child

    res = run_child(spec_for(str(script), ["train.py"], str(tmp_path), str(tmp_path / "run")),
                    timeout=180, step_timeout=120)
    assert res["status"] == "complete", res["incomplete_reasons"]


def test_a_gradient_penalty_trains_through_the_step_whose_flops_are_counted(tmp_path, capfd):
    """WGAN-GP's autograd.grad(create_graph=True) on the critic's output (eriklindernoren's
    wgan_gp.py): the FLOP count of warm-up step 3 must not change what autograd does. torch's
    FlopCounterMode tracks modules with hooks on their outputs' gradients, and the script's
    gradient penalty failed at that step under advisor alone."""
    script = write(tmp_path / "train.py", """
        import torch
        critic = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LeakyReLU(0.2), torch.nn.Linear(16, 1))
        opt = torch.optim.Adam(critic.parameters(), lr=1e-3)
        for step in range(60):
            real, fake = torch.randn(16, 8), torch.randn(16, 8)
            alpha = torch.rand(16, 1)
            mixed = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
            d_mixed = critic(mixed)
            grads = torch.autograd.grad(outputs=d_mixed, inputs=mixed, grad_outputs=torch.ones_like(d_mixed),
                                        create_graph=True, retain_graph=True, only_inputs=True)[0]
            penalty = ((grads.norm(2, dim=1) - 1) ** 2).mean()
            loss = -critic(real).mean() + critic(fake).mean() + 10 * penalty
            opt.zero_grad()
            loss.backward()
            opt.step()
    """)
    from test_runner_support import spec_for

    from advisor.runner.parent import run_child

    res = run_child(spec_for(str(script), ["train.py"], str(tmp_path), str(tmp_path / "run"), count_flops=True,
                             warmup_steps=5), timeout=180, step_timeout=120)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert res["flops"]["per_step"] and res["flops"]["step"] == 3, res["flops"]
