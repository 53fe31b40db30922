"""End to end through the command line: `advisor analyze|inspect|report|rules|rule`."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "fixtures" / "scripts" / "tiny_train.py"
TRACES = REPO / "tests" / "fixtures" / "traces"
FAST = ["--warmup", "2", "--steps", "4", "--profile-steps", "2", "--no-trials"]


def advisor(*args, cwd=None, timeout=300):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "advisor", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("cli")
    out = tmp / "run"
    r = advisor("analyze", "--json", "--out", out, *FAST, TINY, "--steps", "500", "--print-every", "1", cwd=tmp)
    return r, out


def test_analyze_json_and_run_directory(tiny_run):
    r, out = tiny_run
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)  # stdout is advisor's JSON alone...
    assert "loss" in r.stderr  # ...the script's own prints went to stderr
    assert res["status"] == "complete"
    assert res["step_time_ms"] > 0 and res["samples_per_s"] > 0 and res["batch_size"] == 64
    total = sum(res["breakdown"].values())
    assert abs(total - res["profiled_step_time_ms"]) < 1e-6 * max(1.0, total)
    assert set(res["breakdown"]) >= {"data_wait", "forward", "backward", "optimizer"}
    assert isinstance(res["kernel_time_by_class"], dict)
    assert "finished" not in r.stdout  # the script was stopped after the measured steps
    for name in ("run.json", "index.html", "child.json", "spec.json"):
        assert (out / name).is_file(), name
    traces = list((out / "tb" / "baseline").glob("*.pt.trace.json.gz"))
    assert len(traces) == 1
    json.loads(gzip.open(traces[0]).read())  # valid Chrome trace JSON (opens in Perfetto)
    doc = json.loads((out / "run.json").read_text())
    assert doc["config"]["dataloader"]["value"]["batch_size"] == 64
    assert doc["config"]["optimizer"]["where"].endswith("tiny_train.py:21")


def test_never_overwrites_a_run(tiny_run, tmp_path):
    _, out = tiny_run
    r = advisor("analyze", "--out", out, *FAST, TINY, cwd=tmp_path)
    assert r.returncode == 1 and "never overwrites" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_report_rerenders(tiny_run, tmp_path):
    _, out = tiny_run
    (out / "index.html").unlink()
    r = advisor("report", out)
    assert r.returncode == 0, r.stderr
    assert "advisor report" in (out / "index.html").read_text()


def test_tensorboard_lists_an_advisor_run(tiny_run, query_tb_profiler):
    _, out = tiny_run
    info = query_tb_profiler(out / "tb", runs=["baseline"])
    assert "baseline" in info["runs"]
    assert info["overview"]["baseline"]


def test_missing_script_is_one_line_and_no_run_dir(tmp_path):
    r = advisor("analyze", "nope.py", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().count("\n") == 0 and "nope.py: no such file" in r.stderr
    assert not (tmp_path / "reports").exists()


def test_script_failing_mid_run_keeps_an_incomplete_run(tmp_path):
    r = advisor("analyze", "--out", tmp_path / "run", *FAST, TINY, "--raise-at", "5", cwd=tmp_path)
    assert r.returncode == 1
    assert "ValueError: planted failure at step 5" in r.stderr  # the script's own traceback
    assert r.stderr.strip().splitlines()[-1].startswith("advisor: run incomplete: script raised ValueError")
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["status"] == "incomplete" and doc["steps_seen"] == 4
    assert len(doc["measurement"].get("step_time_ms") and [1] or []) == 1  # the timed steps are kept


STALLS = """
import time
import torch
m = torch.nn.Linear(4, 2)
opt = torch.optim.SGD(m.parameters(), lr=0.1)


def next_batch(it):
    if it == 7:
        time.sleep(600)   # a deadlocked loader
    return torch.randn(8, 4)


for it in range(1000):
    m(next_batch(it)).sum().backward()
    opt.step()
    opt.zero_grad()
"""


def test_a_stalled_script_is_stopped_and_its_stacks_shown(tmp_path):
    script = tmp_path / "stalls.py"
    script.write_text(STALLS)
    r = advisor("analyze", "--out", tmp_path / "run", *FAST, "--stall-timeout", "3", script, cwd=tmp_path)
    assert r.returncode == 1
    assert "the script stalled; where each thread was:" in r.stderr
    assert 'stalls.py", line 10 in next_batch' in r.stderr and 'stalls.py", line 15 in <module>' in r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("advisor: run incomplete: stalled: no progress (no training step, forward, batch or "
                           "backward) for 3 s after step 7"), last
    doc = json.loads((tmp_path / "run" / "run.json").read_text())
    assert doc["status"] == "incomplete" and doc["measurement"]["steps_measured"] >= 1  # kept


def test_inspect_gpu_fixture_json():
    r = advisor("inspect", "--json", TRACES / "fp32_nchw.pt.trace.json.gz")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    k = res["kernel_time_by_class"]
    assert k["gemm_conv"] > 0.5 and k.get("tc_gemm_conv", 0.0) < 0.01
    codes = [f["code"] for f in res["findings"]]
    assert "ADV101" in codes and "ADV106" in codes
    assert res["environment"]["gpu_name"] == "NVIDIA H200"


def test_inspect_tells_the_precision_and_layout_configurations_apart():
    """Real H200 traces of one model in four configurations: each gets the fixes it needs, and
    only those (AMP for fp32, channels_last for AMP NCHW, neither once both are on)."""
    def layout_and_precision(name):
        r = advisor("inspect", "--json", TRACES / f"{name}.pt.trace.json.gz")
        assert r.returncode == 0, r.stderr
        found = {f["code"] for f in json.loads(r.stdout)["findings"]}
        return found & {"ADV101", "ADV117", "ADV102"}

    assert layout_and_precision("fp32_nchw") == {"ADV101"}
    # TF32 allowed: cuDNN runs NHWC TF32 kernels with transposes around them, and some fp32 ones
    assert layout_and_precision("tf32_nchw") == {"ADV101", "ADV117", "ADV102"}
    assert layout_and_precision("amp_bf16_nchw") == {"ADV102"}
    assert layout_and_precision("amp_bf16_channels_last") == set()


def test_inspect_run_directory_uses_its_observed_config():
    r = advisor("inspect", "--json", REPO / "tests" / "fixtures" / "runs" / "cifar_slow_h200")
    res = json.loads(r.stdout)
    by = {f["code"]: f for f in res["findings"]}
    assert "ADV108" in by and "examples/cifar_resnet.py:" in by["ADV108"]["message"]


@pytest.mark.parametrize("content,needle", [
    (b"", "empty"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 2', "truncated"),
    (b'{"hello": "world"}', "not a Kineto"),
])
def test_inspect_bad_traces(tmp_path, content, needle):
    p = tmp_path / "t.json"
    p.write_bytes(content)
    r = advisor("inspect", p)
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1 and needle.lower() in r.stderr.lower(), r.stderr


def test_rules_and_rule_doc():
    r = advisor("rules")
    assert r.returncode == 0 and "ADV101" in r.stdout and "nchw-transposes" in r.stdout
    r = advisor("rule", "ADV102")
    assert r.returncode == 0
    for section in ("What it does", "Why is this bad", "Example", "Fix", "Fix safety"):
        assert section in r.stdout
    assert advisor("rule", "ADV999").returncode == 2


def test_threshold_option():
    fx = TRACES / "slow_loader.pt.trace.json.gz"
    codes = lambda r: [f["code"] for f in json.loads(r.stdout)["findings"]]  # noqa: E731
    assert "ADV103" in codes(advisor("inspect", "--json", fx))
    assert "ADV103" not in codes(advisor("inspect", "--json", "--threshold", "data_wait_frac=0.99", fx))
    r = advisor("inspect", "--threshold", "bogus=1", fx)
    assert r.returncode == 2 and "unknown threshold" in r.stderr


def test_unknown_fix_is_a_usage_error(tmp_path):
    r = advisor("analyze", "--fix", "amp,warp-drive", TINY, cwd=tmp_path)
    assert r.returncode == 2 and "no fix named warp-drive" in r.stderr
    assert not (tmp_path / "reports").exists()


def test_inspect_several_ranks_finds_the_straggler():
    r = advisor("inspect", "--json", *(TRACES / f"ddp_cpu_straggler_rank{i}.pt.trace.json.gz" for i in (0, 1)))
    assert r.returncode == 0, r.stderr
    for res in json.loads(r.stdout):
        adv116 = [f for f in res["findings"] if f["code"] == "ADV116"]
        assert adv116 and adv116[0]["message"].startswith("Rank 1 is the straggler")


def test_every_package_is_installed():
    """pyproject.toml lists the packages a non-editable install ships: each one of advisor's."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "advisor").rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)
