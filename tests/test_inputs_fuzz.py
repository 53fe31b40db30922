"""`advisor inspect` and `advisor report` on mutated inputs (issue 27, "Inputs"): whatever the bytes,
a clean one-line error (exit 1 or 2) or a result (exit 0), never a traceback.

Seeds are the real fixture traces and run.json documents; hypothesis mutates them: keys dropped,
values replaced by other types, huge numbers, NaN, nested garbage, then the bytes truncated,
flipped or spliced, gzip or not. The CLI runs in-process (advisor.cli.main) so that 1,000 examples
take well under a minute. The command's last-resort guard ("internal error") must never be what
answers: every crash found here was fixed where the data enters.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import io
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from advisor.cli import main  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures"
SEED_TRACES = ("ddp_cpu_exposed_rank0", "sync_item", "ddp_nccl_exposed_rank0")
SEED_RUNS = ("cifar_tuned_h200", "cifar_ladder_h100", "imagefolder_dali_h200", "profiler_tutorial_h100",
             "gpt_lm_micro_batches_h100")
RUN_WITH_TRACE = "cifar_tuned_h200"  # its tb/ is linked into the fuzzed run directory: the timeline is drawn

SETTINGS = dict(deadline=None, derandomize=True, database=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.large_base_example, HealthCheck.filter_too_much])


# --- running the CLI in-process -----------------------------------------------------------------

def run_cli(argv: list[str]) -> tuple[int, str, bytes]:
    """(exit code, stderr, stdout bytes) of advisor.cli.main(argv); argparse's exits count too."""
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
    out.flush()
    return rc, err.getvalue(), out.buffer.getvalue()


def check_clean(argv: list[str]) -> int:
    rc, err, out = run_cli(argv)
    assert "Traceback" not in err, err
    assert "internal error" not in err, err
    assert rc in (0, 1, 2, 3), (rc, err)  # 3: compare --fail-below, the gate failed
    if rc in (1, 2):
        assert "advisor:" in err and err.strip(), err
    elif "--json" in argv:
        json.loads(out)  # a result is valid JSON (NaN written as null)
    return rc


# --- seeds --------------------------------------------------------------------------------------

@functools.cache
def trace_seed(name: str) -> dict:
    with gzip.open(FIXTURES / "traces" / f"{name}.pt.trace.json.gz", "rb") as f:
        return json.load(f)


@functools.cache
def run_seed(name: str) -> dict:
    doc = json.loads((FIXTURES / "runs" / name / "run.json").read_bytes())
    if name == "cifar_ladder_h100":  # no fixture ran several processes: a ranks table to mutate too
        doc = {**doc, "ranks": [
            {"rank": 0, "device": "cuda:0", "trace_files": ["tb/baseline/rank0.pt.trace.json.gz"],
             "step_time_ms": 41.5, "data_wait_ms": 1.2, "breakdown_ms": {"forward": 10.0, "backward": 20.0},
             "communication_ms": 3.0, "exposed_communication_ms": 1.0},
            {"rank": 1, "device": "cuda:1", "trace_files": [], "missing": "no trace"}]}
    return doc


@functools.cache
def paths_of(kind: str, name: str) -> tuple[tuple, ...]:
    """Every key path into a seed document (containers included), the root first."""
    doc = trace_seed(name) if kind == "trace" else run_seed(name)
    out: list[tuple] = [()]

    def walk(v, path):
        items = v.items() if isinstance(v, dict) else enumerate(v) if isinstance(v, list) else ()
        for k, x in items:
            out.append((*path, k))
            walk(x, (*path, k))

    walk(doc, ())
    return tuple(out)


# --- mutations ----------------------------------------------------------------------------------

SCALARS = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.sampled_from([0, -1, 1, 2 ** 63, -(2 ** 63) - 1, 2 ** 64, 10 ** 30]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -0.0]),
    st.text(max_size=20),
    st.sampled_from(["", "ProfilerStep#1", "Optimizer.step#SGD.step", "kernel", "cpu_op", "X", "complete",
                     "accepted", "baseline", "amp", "../../etc/passwd", "/dev/zero", "tb", "\u2028<script>",
                     "x" * 5000, "NaN", "1e999", "[/]", "[bold]x", "a[link=javascript:x]b"]),
)
GARBAGE = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=12)


def _get(doc, path):
    for k in path:
        doc = doc[k]
    return doc


def _set(doc, path: tuple, value, delete: bool = False):
    """doc with the value at path replaced (or deleted), copying only the containers on the path."""
    if not path:
        return value
    copy = dict(doc) if isinstance(doc, dict) else list(doc)
    k = path[0]
    if len(path) == 1:
        if delete:
            del copy[k]
        else:
            copy[k] = value
    else:
        copy[k] = _set(doc[k], path[1:], value, delete)
    return copy


_INTERESTING = ("ProfilerStep#", "advisor::", "Optimizer.", "[memory]", "Memcpy", "Memset", "cudaLaunch", "nccl")
_INTERESTING_CATS = {"kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "cpu_instant_event", "cuda_runtime",
                     "ac2g"}


@functools.cache
def interesting_paths(name: str) -> tuple[tuple, ...]:
    """Paths into the events the analysis keys on (steps, phases, kernels, copies, memory, syncs)."""
    events = trace_seed(name)["traceEvents"]
    keep = {i for i, e in enumerate(events) if isinstance(e, dict) and (
        e.get("cat") in _INTERESTING_CATS or str(e.get("name", "")).startswith(_INTERESTING))}
    return tuple(p for p in paths_of("trace", name) if len(p) >= 2 and p[0] == "traceEvents" and p[1] in keep)


@st.composite
def mutated_doc(draw, kind: str, name: str, top_keys: tuple[str, ...] = ()):
    doc = trace_seed(name) if kind == "trace" else run_seed(name)
    paths = paths_of(kind, name)
    focus = interesting_paths(name) if kind == "trace" else paths
    for _ in range(draw(st.integers(0, 6))):
        where = draw(st.sampled_from(["top", "focus", "focus", "any"] if top_keys else ["focus", "any"]))
        if where == "top":
            path = (draw(st.sampled_from(top_keys)),)
        else:
            pool = focus if where == "focus" else paths
            path = pool[draw(st.integers(0, len(pool) - 1))]
        try:
            _get(doc, path)
        except (KeyError, IndexError, TypeError):
            continue  # an earlier mutation removed it
        action = draw(st.sampled_from(["replace", "replace", "delete", "wrap", "duplicate"]))
        if action == "delete" and path:
            doc = _set(doc, path, None, delete=True)
        elif action == "wrap":
            doc = _set(doc, path, draw(st.sampled_from(["list", "dict"])) == "list" and [_get(doc, path)]
                       or {"value": _get(doc, path)})
        elif action == "duplicate" and path and isinstance(_get(doc, path[:-1]), list):
            doc = _set(doc, path[:-1], [*_get(doc, path[:-1]), _get(doc, path)])
        else:
            doc = _set(doc, path, draw(GARBAGE))
    return doc


@st.composite
def mutated_bytes(draw, data: bytes):
    """Byte-level damage: truncation, flipped bytes, spliced-in bytes, a deleted range."""
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
        if op == "truncate":
            data = data[:at]
        elif op == "flip" and at < len(data):
            data = data[:at] + bytes([data[at] ^ draw(st.integers(1, 255))]) + data[at + 1:]
        elif op == "insert":
            data = data[:at] + draw(st.one_of(st.binary(min_size=1, max_size=16),
                                              st.sampled_from([b"]", b"}", b"},{", b'"', b"\\", b"\xff\xfe",
                                                               b"[" * 3000, b"NaN", b"\x00"]))) + data[at:]
        else:
            data = data[:at] + data[at + draw(st.integers(1, 64)):]
    return data


def serialize(draw, doc) -> bytes:
    indent = draw(st.sampled_from([None, None, 1]))
    try:
        text = json.dumps(doc, allow_nan=True, indent=indent)
    except (RecursionError, ValueError):
        text = "{}"
    data = text.encode("utf-8", "surrogatepass")
    return draw(mutated_bytes(data)) if draw(st.booleans()) else data


def maybe_gzip(draw, data: bytes) -> bytes:
    if draw(st.booleans()):
        data = gzip.compress(data, compresslevel=1, mtime=0)
        if draw(st.integers(0, 4)) == 0:  # a gzip stream cut short or damaged
            data = draw(mutated_bytes(data))
    return data


# --- inspect ------------------------------------------------------------------------------------

TRACE_TOP = ("traceEvents", "deviceProperties", "distributedInfo", "baseTimeNanoseconds", "schemaVersion",
             "cuda_runtime_version", "cuda_driver_version", "displayTimeUnit")


@settings(max_examples=400, **SETTINGS)
@given(data=st.data(), name=st.sampled_from(SEED_TRACES), as_json=st.booleans(), gz=st.booleans(),
       with_other_rank=st.booleans())
def test_inspect_survives_mutated_traces(data, name, as_json, gz, with_other_rank):
    doc = data.draw(mutated_doc("trace", name, TRACE_TOP))
    raw = maybe_gzip(data.draw, serialize(data.draw, doc))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / ("t.pt.trace.json.gz" if gz else "t.pt.trace.json")
        path.write_bytes(raw)
        argv = ["inspect", str(path)]
        if with_other_rank and name.startswith("ddp_"):  # ranks side by side: the multi-rank rules run
            argv.append(str(FIXTURES / "traces" / f"{name.replace('rank0', 'rank1')}.pt.trace.json.gz"))
        check_clean(argv + (["--json"] if as_json else []))


@settings(max_examples=100, **SETTINGS)
@given(raw=st.one_of(st.binary(max_size=2048),
                     st.binary(max_size=512).map(lambda b: b"\x1f\x8b" + b),
                     st.binary(max_size=512).map(lambda b: gzip.compress(b, mtime=0)),
                     st.sampled_from([b"{}", b"[]", b"null", b'{"traceEvents": {}}', b'{"traceEvents": [1, "x", null]}',
                                      b'{"traceEvents": []}', b'{"traceEvents": [' + b"[" * 5000,
                                      b"[" * 100000, b'{"traceEvents": [{"ph": "X", "cat": "kernel"}]}',
                                      b"\xef\xbb\xbf{}", "{\"traceEvents\": []}".encode("utf-16")])),
       as_json=st.booleans())
def test_inspect_survives_garbage_bytes(raw, as_json):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "g.pt.trace.json"
        path.write_bytes(raw)
        check_clean(["inspect", str(path)] + (["--json"] if as_json else []))


# --- report (and inspect of a run directory) ----------------------------------------------------

RUN_TOP = ("schema", "status", "incomplete_reasons", "measurement", "analysis", "config", "environment",
           "findings", "trials", "patch", "roofline", "schedule", "own_traces", "trial_summary", "notes",
           "traces", "ranks", "command", "memory", "settings", "exit", "losses", "applied")


def _run_dir(tmp: str, name: str, raw: bytes) -> Path:
    run = Path(tmp) / "run"
    run.mkdir()
    (run / "run.json").write_bytes(raw)
    (run / "fixes.patch").write_text("--- a/train.py\n+++ b/train.py\n@@ -1,2 +1,2 @@\n-x = 1\n+x = 2\n y = 3\n")
    if name == RUN_WITH_TRACE:
        os.symlink(FIXTURES / "runs" / name / "tb", run / "tb")
    return run


@settings(max_examples=400, **SETTINGS)
@given(data=st.data(), name=st.sampled_from(SEED_RUNS), inspect_too=st.integers(0, 3))
def test_report_survives_mutated_run_json(data, name, inspect_too):
    doc = data.draw(mutated_doc("run", name, RUN_TOP))
    raw = serialize(data.draw, doc)
    with tempfile.TemporaryDirectory() as tmp:
        run = _run_dir(tmp, name, raw)
        check_clean(["report", str(run)])
        if inspect_too == 0:  # a run directory's config feeds the config rules
            shutil.copy(FIXTURES / "traces" / "ddp_cpu_exposed_rank0.pt.trace.json.gz", run / "r.pt.trace.json.gz")
            check_clean(["inspect", str(run), "--json"])


@settings(max_examples=100, **SETTINGS)
@given(data=st.data(), name=st.sampled_from(SEED_RUNS))
def test_report_survives_damaged_run_json_bytes(data, name):
    raw = (FIXTURES / "runs" / name / "run.json").read_bytes()
    raw = data.draw(st.one_of(mutated_bytes(raw), st.binary(max_size=1024),
                              st.sampled_from([b"", b"null", b"[]", b"1", b'"run"', b"{", b"[" * 100000,
                                               b"\xff\xfe\x00", b'{"status": NaN}'])))
    with tempfile.TemporaryDirectory() as tmp:
        run = _run_dir(tmp, name, raw)
        check_clean(["report", str(run / "run.json")])


# --- what the fuzzer found, kept as plain examples -----------------------------------------------

def _trace_file(tmp_path: Path, doc) -> Path:
    path = tmp_path / "t.pt.trace.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    return path


def test_random_bytes_are_one_line_not_a_traceback(tmp_path):
    """`inspect` on random bytes raised AttributeError: 'UnicodeDecodeError' object has no attribute 'msg'."""
    path = tmp_path / "noise.pt.trace.json"
    path.write_bytes(random_bytes(4 << 20))
    rc, err, _ = run_cli(["inspect", str(path)])
    assert rc == 1 and "Traceback" not in err and str(path) in err and "not a JSON text file" in err, err
    assert len(err.strip().splitlines()) == 1


def random_bytes(n: int) -> bytes:
    import random

    return random.Random(27).randbytes(n)


def test_deeply_nested_json_is_one_line(tmp_path):
    path = tmp_path / "deep.pt.trace.json"
    path.write_bytes(b'{"traceEvents": [' + b"[" * 200_000)
    rc, err, _ = run_cli(["inspect", str(path)])
    assert rc == 1 and "Traceback" not in err and str(path) in err, err


def test_events_that_are_not_objects_are_skipped(tmp_path):
    doc = trace_seed("ddp_cpu_exposed_rank0")
    doc = {**doc, "traceEvents": [1, "x", None, [], *doc["traceEvents"], {"ph": "X", "cat": "cpu_op", "name": 7, "ts": 1}]}
    assert check_clean(["inspect", str(_trace_file(tmp_path, doc)), "--json"]) == 0


def test_nan_and_infinite_times_drop_their_events(tmp_path):
    doc = trace_seed("sync_item")
    events = [dict(e) for e in doc["traceEvents"]]
    for i, e in enumerate(events[:200]):
        if isinstance(e.get("ts"), float):
            e["ts" if i % 2 else "dur"] = math.nan if i % 3 else math.inf
    assert check_clean(["inspect", str(_trace_file(tmp_path, {**doc, "traceEvents": events})), "--json"]) == 0


@pytest.mark.parametrize("meta", [
    {"deviceProperties": [1, "gpu", None, {"name": ["H100"], "totalGlobalMem": "80GB", "id": 2 ** 70}]},
    {"deviceProperties": {"name": "H100"}, "distributedInfo": ["rank", 0]},
    {"distributedInfo": {"rank": "zero", "world_size": 1e308}, "baseTimeNanoseconds": "soon"},
    {"cuda_runtime_version": {"v": 12}, "cuda_driver_version": 2 ** 80},
])
def test_trace_metadata_of_other_types(tmp_path, meta):
    doc = {**trace_seed("ddp_cpu_exposed_rank0"), **meta}
    assert check_clean(["inspect", str(_trace_file(tmp_path, doc)), "--json"]) == 0


@pytest.mark.parametrize("patch", [
    {"config": {"optimizer": {"where": "train.py:3"}, "autocast": 5, "dataloader": {"value": {"num_workers": "4"}}}},
    {"analysis": {"top_kernels": [{"name": 1.5, "cls": "gemm"}, "k", {"name": None}], "breakdown": {"forward": "slow"}}},
    {"trials": [1, {"name": ["x"], "status": {}, "interventions": 3}], "findings": [None, {"fix": []}]},
    {"patch": {"file": "/etc/passwd", "notes": [{"edits": 3}], "verification": {"checks": [{"took_effect": False}]}}},
    {"traces": {"baseline": 7}, "ranks": [{"rank": 0, "breakdown_ms": []}, 2], "roofline": {"ceiling": "none"}},
])
def test_run_json_values_of_other_types(tmp_path, patch):
    doc = {**run_seed("imagefolder_dali_h200"), **patch}
    run = _run_dir(str(tmp_path), "imagefolder_dali_h200", json.dumps(doc).encode())
    assert check_clean(["report", str(run)]) == 0
    assert "root:" not in (run / "index.html").read_text()  # a path out of the run directory is never read
    shutil.copy(FIXTURES / "traces" / "ddp_cpu_exposed_rank0.pt.trace.json.gz", run / "r.pt.trace.json.gz")
    assert check_clean(["inspect", str(run), "--json"]) == 0


def test_run_directory_with_a_broken_run_json(tmp_path):
    """`inspect RUN_DIR` read run.json for its config and raised on bytes that are not JSON."""
    run = _run_dir(str(tmp_path), "cifar_tuned_h200", b'{"config": {"x": "\xed\xa0\x80"}}')
    shutil.copy(FIXTURES / "traces" / "ddp_cpu_exposed_rank0.pt.trace.json.gz", run / "r.pt.trace.json.gz")
    rc, err, _ = run_cli(["inspect", str(run)])
    assert rc == 1 and "run.json: not valid JSON" in err and "Traceback" not in err, err


# --- compare reads the same documents -----------------------------------------------------------

@settings(max_examples=100, **SETTINGS)
@given(data=st.data(), name=st.sampled_from(SEED_RUNS), flags=st.sampled_from([["--json"], ["--fail-below", "0.9"], []]))
def test_compare_survives_a_mutated_run_json(data, name, flags):
    doc = data.draw(mutated_doc("run", name, RUN_TOP))
    with tempfile.TemporaryDirectory() as tmp:
        run = _run_dir(tmp, name, serialize(data.draw, doc))
        base = FIXTURES / "runs" / RUN_WITH_TRACE
        check_clean(["compare", str(base), str(run), "--out", str(Path(tmp) / "c.html"), *flags])


def test_compare_with_an_empty_finding(tmp_path):
    """An empty finding ({}) is falsy: the findings diff took the other run's (None) and raised."""
    doc = {**run_seed("cifar_tuned_h200"), "findings": [{}]}
    run = _run_dir(str(tmp_path), "cifar_tuned_h200", json.dumps(doc).encode())
    base = FIXTURES / "runs" / "cifar_slow_h200"
    assert check_clean(["compare", str(base), str(run), "--out", str(tmp_path / "c.html")]) == 0
