"""TensorBoard's PyTorch Profiler plugin reads traces laid out as advisor writes them.

advisor writes `<run>/tb/<run-name>/<worker>.<time_ns>.pt.trace.json.gz` with
torch.profiler.tensorboard_trace_handler(..., use_gzip=True). This test records two such runs
(`baseline`, `trial-amp`) from a tiny CPU training loop, starts a REAL `tensorboard` server on
127.0.0.1 (free port; always stopped) and reads the plugin's HTTP API through the
`query_tb_profiler` fixture (tests/conftest.py), which later tests can point at advisor's run dirs.
"""

import gzip
import json
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("tensorboard")
pytest.importorskip("torch_tb_profiler")

TRACE_NAME = re.compile(r"^(?P<worker>.+)\.(?P<ts>\d+)\.pt\.trace\.json\.gz$")


def record_run(logdir, run_name, steps=5):
    """A tiny training loop under torch.profiler: wait 0, warmup 1, active 3 -> one trace file."""
    from torch.profiler import (
        ProfilerActivity,
        profile,
        schedule,
        tensorboard_trace_handler,
    )

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    handler = tensorboard_trace_handler(str(logdir / run_name), use_gzip=True)
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=3, repeat=1),
                 on_trace_ready=handler, record_shapes=True, profile_memory=True) as prof:
        for _ in range(steps):
            x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))
            with torch.profiler.record_function("advisor::forward"):
                loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            prof.step()
    files = sorted((logdir / run_name).iterdir())
    assert len(files) == 1, files
    return files[0]


@pytest.fixture(scope="module")
def tb_logdir(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("run") / "tb"
    for name in ("baseline", "trial-amp"):
        record_run(logdir, name)
    return logdir


def test_trace_layout(tb_logdir):
    for name in ("baseline", "trial-amp"):
        (path,) = (tb_logdir / name).iterdir()
        assert TRACE_NAME.match(path.name), path.name
        with gzip.open(path, "rt") as f:
            doc = json.load(f)
        names = {e.get("name") for e in doc["traceEvents"]}
        assert any(n and n.startswith("ProfilerStep#") for n in names)
        assert "advisor::forward" in names


def test_tensorboard_profiler_plugin_reads_runs(tb_logdir, query_tb_profiler):
    info = query_tb_profiler(tb_logdir, runs=["baseline", "trial-amp"], timeout=90)
    assert info["url"].startswith("http://127.0.0.1:")
    assert set(info["runs"]) >= {"baseline", "trial-amp"}

    (trace,) = (tb_logdir / "baseline").iterdir()
    worker = TRACE_NAME.match(trace.name).group("worker")
    assert "Overview" in info["views"]["baseline"]
    assert info["workers"]["baseline"] == [worker]
    assert info["spans"]["baseline"][worker] == ["1"]

    overview = info["overview"]["baseline"][worker]
    assert overview, "empty overview"
    rows = overview["steps"]["rows"]
    assert len(rows) == 3  # the three active ProfilerSteps
    env = {e["title"]: e["value"] for e in overview["environments"]}
    assert env["Device Type"] == "CPU"
    assert overview.get("performance"), overview.keys()
    assert info["overview"]["trial-amp"], "empty overview for trial-amp"


def test_the_plugin_shows_each_rank_of_an_nproc_run_as_a_worker(query_tb_profiler):
    """`advisor analyze --nproc-per-node 2` on 2 H200s (reports/examples/ddp_resnet-nproc2-h200):
    one TensorBoard run, the two ranks its workers, and the plugin's distributed view over them."""
    from pathlib import Path

    logdir = Path(__file__).resolve().parent.parent / "reports" / "examples" / "ddp_resnet-nproc2-h200" / "tb"
    info = query_tb_profiler(logdir, runs=["baseline"], timeout=120)
    assert sorted(info["workers"]["baseline"]) == ["rank0", "rank1"]
    assert "Distributed" in info["views"]["baseline"], info["views"]["baseline"]
