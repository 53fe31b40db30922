"""Parsing Kineto traces: real CPU traces recorded here, the real H200 fixtures, odd layouts
and broken files."""
from __future__ import annotations

import gzip
import json
import os
import sys

import numpy as np
import pytest
from cpu_traces import GPU_CONFIGS, gpu_fixture, record_all

from advisor.trace import TraceError, find_trace_files, load as load_mod, load_trace, load_traces

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
import make_large_trace  # noqa: E402


@pytest.fixture(scope="session")
def cpu() -> dict:
    return record_all()


def _raw(path: str) -> dict:
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        return json.load(f)


def _count(doc: dict, cats: set) -> int:
    return sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in cats)


# --- real CPU traces -------------------------------------------------------------------

def test_run_directory_finds_tensorboard_trace(cpu):
    files = find_trace_files(cpu["tb_run"])
    assert len(files) == 1 and files[0].name.endswith(".pt.trace.json.gz")
    assert "tb" in files[0].parts
    m = load_trace(cpu["tb_run"])
    assert load_trace(os.path.join(cpu["tb_run"], "tb")).meta["trace_path"] == m.meta["trace_path"]
    assert [len(t) for t in (m.kernels, m.runtime, m.memcpy)] == [0, 0, 0]


def test_cpu_events_match_a_full_json_load(cpu):
    path = str(find_trace_files(cpu["tb_run"])[0])
    raw, m = _raw(path), load_trace(path)
    assert len(m.cpu) == _count(raw, {"cpu_op", "user_annotation", "python_function"})
    names = {m.names[i] for i in m.cpu.name_id}
    assert {"advisor::forward", "advisor::backward", "aten::convolution"} <= names
    assert len(m.memory) == sum(1 for e in raw["traceEvents"] if e.get("name") == "[memory]")
    # columns: aligned, sorted, relative to the first event
    for t in (m.cpu, m.memory):
        assert len({len(getattr(t, c)) for c in t.columns}) == 1
        assert np.all(np.diff(t.ts) >= 0)
    assert m.cpu.ts.min() == 0 or m.memory.ts.min() == 0
    first = min(e["ts"] for e in raw["traceEvents"] if e.get("ph") in ("X", "i") and "ts" in e
                and e.get("cat") in ("cpu_op", "user_annotation", "cpu_instant_event"))
    assert m.meta["t0_us"] == pytest.approx(first)
    assert m.meta["base_time_ns"] == raw["baseTimeNanoseconds"]


def test_profiler_steps(cpu):
    m = load_trace(cpu["tb_run"])
    assert [s[2] for s in m.steps] == [f"ProfilerStep#{i}" for i in range(1, 5)]
    assert all(d > 0 for _, d, _ in m.steps)
    assert all(a[0] + a[1] <= b[0] for a, b in zip(m.steps, m.steps[1:]))


def test_steps_fall_back_to_optimizer_step_ends(cpu):
    m = load_trace(cpu["plain_torch_only"])
    raw = _raw(cpu["plain_torch_only"])
    opt = sorted(e["ts"] + e["dur"] for e in raw["traceEvents"]
                 if str(e.get("name", "")).startswith("Optimizer.step#") and e.get("ph") == "X")
    assert len(opt) == 6 and len(m.steps) == 5
    t0 = m.meta["t0_us"]
    for (s, d, _), a, b in zip(m.steps, opt, opt[1:]):
        assert s == pytest.approx(a - t0, abs=1e-3) and d == pytest.approx(b - a, abs=1e-3)


def test_steps_fall_back_to_whole_trace(cpu):
    m = load_trace(cpu["no_optimizer"])
    assert len(m.steps) == 1 and m.steps[0][2] == "trace"
    assert m.steps[0][1] == pytest.approx(m.duration)


def test_cut_off_steps_are_dropped(cpu):
    raw = _raw(cpu["cut"])
    recorded = [e["name"] for e in raw["traceEvents"]
                if str(e.get("name", "")).startswith("ProfilerStep#") and e.get("ph") == "X"]
    assert len(recorded) == 5  # #0 holds only zero_grad, #4 stops after forward
    m = load_trace(cpu["cut"])
    assert [s[2] for s in m.steps] == sorted(recorded)[1:4]


# --- layouts --------------------------------------------------------------------------

def _columns(m):
    return {t: {c: getattr(getattr(m, t), c).tolist() for c in getattr(m, t).columns}
            for t in ("cpu", "runtime", "kernels", "memcpy", "memset", "memory")}


def _same_model(a, b):
    assert a.names == b.names and a.steps == b.steps
    assert _columns(a) == _columns(b)


def test_layouts_parse_identically(cpu, tmp_path, monkeypatch):
    """torch's pretty layout, one event per line and one compact line give the same model,
    also when blocks are tiny so that every event straddles a block boundary."""
    src = str(find_trace_files(cpu["tb_run"])[0])
    raw = _raw(src)
    pretty = load_trace(src)
    line = tmp_path / "line.pt.trace.json"
    line.write_text("{\n" + ",\n".join(f'"{k}": {json.dumps(v)}' for k, v in raw.items()
                                       if k != "traceEvents")
                    + ',\n"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in raw["traceEvents"])
                    + "\n]}\n")
    compact = tmp_path / "compact.pt.trace.json.gz"
    with gzip.open(compact, "wt") as f:
        json.dump(raw, f, separators=(",", ":"))
    for p in (line, compact):
        m = load_trace(p)
        m.meta["trace_path"] = pretty.meta["trace_path"]
        _same_model(pretty, m)
    monkeypatch.setattr(load_mod, "BLOCK", 97)
    _same_model(load_trace(line), load_trace(tmp_path / "line.pt.trace.json"))
    small = load_trace(src)
    small.meta["trace_path"] = pretty.meta["trace_path"]
    _same_model(pretty, small)


def test_tricky_json_inside_events(tmp_path, monkeypatch):
    """'},{' inside strings and lists of objects in args are not event boundaries; NaN (which
    some Kineto versions write) is accepted; the closing ']' may be followed by more keys."""
    ev = [{"ph": "X", "cat": "cpu_op", "name": 'weird "},{" name }, {', "pid": 1, "tid": 1,
           "ts": 10.0 + i, "dur": 1.0, "args": {"External id": i, "list": [{"a": 1}, {"b": [2]}]}}
          for i in range(40)]
    text = ('{"traceEvents": [\n' + ",\n".join(json.dumps(e) for e in ev)
            + ',\n{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 12.5, '
              '"dur": 2, "args": {"device": 0, "stream": 7, "correlation": 5, "bw": NaN}}'
            + '\n], "deviceProperties": [{"id": 0, "totalGlobalMem": 42}], "x": "]"}')
    p = tmp_path / "tricky.json"
    p.write_text(text)
    for block in (load_mod.BLOCK, 64, 7):
        monkeypatch.setattr(load_mod, "BLOCK", block)
        m = load_trace(p)
        assert len(m.cpu) == 40 and len(m.kernels) == 1
        assert m.names[m.cpu.name_id[0]] == 'weird "},{" name }, {'
        assert m.meta["device_properties"][0]["totalGlobalMem"] == 42
        assert m.cpu.ext_id.tolist() == list(range(40))


def test_synthetic_large_trace_is_line_per_event(tmp_path):
    src = gpu_fixture("fp32_nchw")
    if not os.path.exists(src):
        src = make_large_trace.DEFAULT_SOURCE
    if not os.path.exists(src):
        pytest.fail("no GPU fixture to repeat")
    out = tmp_path / "big.pt.trace.json"
    stats = make_large_trace.write(make_large_trace.load(src), str(out), 2.0, "line")
    m = load_trace(out)
    base = load_trace(src)
    assert len(m.kernels) == stats["copies"] * len(base.kernels)
    assert len(m.steps) == stats["copies"] * len(base.steps)
    assert len(set(m.kernels.correlation.tolist())) == len(m.kernels)


# --- errors ---------------------------------------------------------------------------

def _error(path) -> str:
    with pytest.raises(TraceError) as e:
        load_trace(path)
    msg = str(e.value)
    assert "\n" not in msg and str(path) in msg
    return msg


def test_errors_are_one_clear_line(cpu, tmp_path):
    src = open(find_trace_files(cpu["tb_run"])[0], "rb").read()
    text = gzip.decompress(src)
    cases = {
        "empty.json": (b"", "empty"),
        "blank.json": (b"  \n", "empty"),
        "empty.json.gz": (gzip.compress(b""), "empty"),
        "cut.json": (text[: len(text) // 2], "truncated"),
        "cut_head.json": (text[:60], "truncated"),
        "cut.json.gz": (src[: len(src) // 2], "truncated"),
        "other.json": (b'{"hello": [1, 2, 3]}', "not a Kineto trace"),
        "list.json": (b"[1, 2]", "not a Kineto trace"),
        "garbage.json": (b"this is not json", "not valid JSON"),
    }
    for name, (data, words) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        assert words in _error(p), name
    assert "no such file" in _error(tmp_path / "missing.pt.trace.json")
    (tmp_path / "nothing_here").mkdir()
    assert "no *.pt.trace.json" in _error(tmp_path / "nothing_here")


def test_logdir_picks_newest_and_load_traces_returns_all(cpu, tmp_path):
    src = find_trace_files(cpu["tb_run"])[0]
    for i, run in enumerate(("baseline", "trial-amp")):
        d = tmp_path / "tb" / run
        d.mkdir(parents=True)
        dst = d / f"host_1.{i}.pt.trace.json.gz"
        dst.write_bytes(src.read_bytes())
        os.utime(dst, (1_700_000_000 + i, 1_700_000_000 + i))
    assert "trial-amp" in load_trace(tmp_path).meta["trace_path"]
    assert [("trial-amp" in m.meta["trace_path"]) for m in load_traces(tmp_path)] == [False, True]


# --- the real GPU traces ----------------------------------------------------------------

@pytest.mark.parametrize("config", GPU_CONFIGS)
def test_gpu_fixture_parses(config):
    path = gpu_fixture(config)
    if not os.path.exists(path):
        pytest.fail(f"fixture missing: {path}")
    raw, m = _raw(path), load_trace(path)
    assert len(m.kernels) == _count(raw, {"kernel"}) > 0
    assert len(m.runtime) == _count(raw, {"cuda_runtime", "cuda_driver"})
    assert len(m.memcpy) == _count(raw, {"gpu_memcpy"})
    # every kernel's launch is in the trace (the trim keeps launch <-> kernel pairs)
    assert np.isin(m.kernels.correlation, m.runtime.correlation).all()
    assert set(m.memcpy.kind.tolist()) <= {"HtoD", "DtoH", "DtoD"}
    assert "HtoD" in m.memcpy.kind.tolist()
    assert m.meta["device_properties"][0]["totalGlobalMem"] > 0
    assert (m.memory.device >= 0).any()
    assert len(m.steps) == 1 and m.steps[0][2].startswith("ProfilerStep#")
