"""Shared test helpers. Kept small on purpose.

Fixtures:
  query_tb_profiler  -> the function below: start a real TensorBoard on a log dir (loopback,
                        free port), read the PyTorch Profiler plugin's HTTP API, stop it.
"""

import contextlib
import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest


def _this_directory_is_the_tests_package() -> None:
    """``from tests import chromium`` names this directory, a namespace package: an installed
    distribution that ships a top-level ``tests`` package of its own (rootutils does) would win
    over it, and those imports fail at collection. The name is bound to this directory here,
    before any test module is imported."""
    import types

    here = os.path.dirname(os.path.abspath(__file__))
    mod = sys.modules.get("tests")
    if mod is not None and here in [os.path.abspath(p) for p in getattr(mod, "__path__", [])]:
        return
    pkg = types.ModuleType("tests")
    pkg.__path__ = [here]
    sys.modules["tests"] = pkg


_this_directory_is_the_tests_package()

TB_PLUGIN = "/data/plugin/pytorch_profiler"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never via a proxy


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get_json(url, timeout=10.0):
    with _NO_PROXY.open(url, timeout=timeout) as r:
        body = r.read()
        if r.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
    return json.loads(body)


def _plugin(base, route, **params):
    query = urllib.parse.urlencode({k: v for k, v in params.items() if v is not None})
    return _get_json(f"{base}{TB_PLUGIN}/{route}" + (f"?{query}" if query else ""))


@contextlib.contextmanager
def tensorboard_server(logdir, timeout=90.0):
    """Run `tensorboard --logdir LOGDIR --host 127.0.0.1 --port <free>`; yield its base URL.

    Waits (bounded by `timeout`) until it answers HTTP; always terminates it (and removes
    the plugin's cache dir, which TensorBoard leaves behind when it is terminated)."""
    deadline = time.monotonic() + timeout
    scratch = tempfile.mkdtemp(prefix="tb-scratch-")
    env = dict(os.environ, TMPDIR=scratch)
    for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        env.pop(k, None)
    proc = None
    try:
        for _attempt in range(3):  # a free port can be taken between our probe and TB's bind
            port = _free_port()
            log = open(os.path.join(scratch, "tensorboard.log"), "w+")
            proc = subprocess.Popen(
                [sys.executable, "-m", "tensorboard.main", "--logdir", str(logdir), "--host", "127.0.0.1",
                 "--port", str(port), "--load_fast=false"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env)
            base = f"http://127.0.0.1:{port}"
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    _get_json(f"{base}/data/plugins_listing", timeout=2.0)
                    break
                except (urllib.error.URLError, ConnectionError, OSError, ValueError):
                    time.sleep(0.5)
            if proc.poll() is None and time.monotonic() < deadline:
                yield base
                return
            log.seek(0)
            tail = log.read()[-2000:]
            if proc.poll() is None:
                raise TimeoutError(f"TensorBoard did not answer within {timeout:.0f} s:\n{tail}")
            if "already in use" not in tail:
                raise RuntimeError(f"TensorBoard exited with {proc.returncode}:\n{tail}")
            proc = None
        raise RuntimeError("TensorBoard could not bind a free port in 3 tries")
    finally:
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        shutil.rmtree(scratch, ignore_errors=True)


def query_tb_profiler(logdir, runs=None, timeout=90.0) -> dict:
    """What TensorBoard's PyTorch Profiler plugin shows for `logdir`, as plain data.

    `logdir` is a TensorBoard log dir holding run folders of `*.pt.trace.json[.gz]` files,
    e.g. advisor's `<run-dir>/tb`. Waits (at most `timeout` seconds in all) until the plugin
    lists every name in `runs` (default: until it lists at least one run and is done loading).
    Returns
        {"url": "http://127.0.0.1:PORT",
         "runs": [run, ...],
         "views": {run: ["Overview", "Operator", ...]},
         "workers": {run: [worker, ...]},                       # workers of the Overview view
         "spans": {run: {worker: [span, ...] | None}},
         "overview": {run: {worker: <overview JSON of the worker's first span>}}}
    Raises TimeoutError (with what was seen) if the runs are not all loaded in time."""
    deadline = time.monotonic() + timeout
    wanted = set(runs or ())
    with tensorboard_server(logdir, timeout=timeout) as base:
        seen = None
        while True:
            seen = _plugin(base, "runs")
            listed = set(seen.get("runs", ()))
            if listed and wanted <= listed and not seen.get("loading"):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"TensorBoard's profiler plugin listed {seen} after {timeout:.0f} s; "
                                   f"wanted {sorted(wanted) or 'any run'}")
            time.sleep(1.0)
        result = {"url": base, "runs": seen["runs"], "views": {}, "workers": {}, "spans": {}, "overview": {}}
        for run in seen["runs"]:
            views = _plugin(base, "views", run=run)
            result["views"][run] = views
            view = "Overview" if "Overview" in views else (views[0] if views else "Overview")
            workers = _plugin(base, "workers", run=run, view=view)
            result["workers"][run] = workers
            result["spans"][run] = {}
            result["overview"][run] = {}
            for worker in workers:
                spans = _plugin(base, "spans", run=run, worker=worker)
                result["spans"][run][worker] = spans
                span = spans[0] if spans else "default"  # the plugin's key for a file without a span
                result["overview"][run][worker] = _plugin(base, "overview", run=run, worker=worker, span=span)
        return result


@pytest.fixture(name="query_tb_profiler")
def _query_tb_profiler_fixture():
    """The query_tb_profiler(logdir, runs=None, timeout=90.0) -> dict function above."""
    return query_tb_profiler



# Tests that start processes (the script under advisor, TensorBoard, Chromium) are marked
# `process` at collection, by what the test's own code and its fixtures' code call: `-m "not
# process"` is the suite that runs in-process alone (a minute), `-m process` the rest.
_STARTS_PROCESSES = ("subprocess.", "Popen(", "run_child(", "run_many(", "HeldChild(", "WarmChild(", "_analyze(",
                     "analyze(", "tensorboard_server(", "query_tb_profiler", "chromium", "run_script(", "_run(")


def _starts_processes(fn, depth: int = 3, seen=None) -> bool:
    """fn's source calls what starts a process, itself or through the module's helpers it calls
    (``depth`` levels: a test calling ``_analyze(...)`` that calls ``subprocess.run``)."""
    import inspect
    import types

    seen = set() if seen is None else seen
    if id(fn) in seen:
        return False
    seen.add(id(fn))
    try:
        src = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    if any(s in src for s in _STARTS_PROCESSES):
        return True
    code, glb = getattr(fn, "__code__", None), getattr(fn, "__globals__", {})
    if depth <= 0 or code is None:
        return False
    names = set(code.co_names) | {n for c in code.co_consts if isinstance(c, types.CodeType) for n in c.co_names}
    helpers = [glb[n] for n in names if isinstance(glb.get(n), types.FunctionType)]
    return any(_starts_processes(h, depth - 1, seen) for h in helpers)


def pytest_configure(config):
    config.addinivalue_line("markers", "process: the test starts processes (the script under advisor, a server)")


def pytest_collection_modifyitems(config, items):
    per_file: dict = {}
    for item in items:
        fn = getattr(item, "function", None)
        fixtures = getattr(item, "_fixtureinfo", None)
        defs = [d.func for name in (fixtures.names_closure if fixtures else ())
                for d in (fixtures.name2fixturedefs.get(name) or ())]
        starts = fn is not None and any(_starts_processes(f) for f in [fn, *defs])
        if starts:
            item.add_marker(pytest.mark.process)
        key = str(getattr(item, "path", item.fspath))
        per_file[key] = per_file.get(key, 0) + int(starts)
    # the longest files first (tests/durations.json, measured), each file's tests in their
    # order: with several workers (xdist, a file each) the long files do not all come last
    try:
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "durations.json")) as f:
            took = json.load(f)["files"]
    except (OSError, ValueError, KeyError):
        took = {}
    order = {f: i for i, f in enumerate(per_file)}

    def weight(it) -> tuple:
        path = str(getattr(it, "path", it.fspath))
        return -float(took.get(os.path.basename(path), 0)), order[path]

    items.sort(key=weight)
