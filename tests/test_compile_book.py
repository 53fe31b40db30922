"""The compile book: a trial that loaded its stack's graphs from the analyze's shared compile
cache is costed with the compile that made them, as the user's first run pays it."""

import json

from advisor import measure
from advisor.trials import compile_book


def _spec(tmp_path, *interventions, args=("--epochs", "1")):
    return {"script": "/w/train.py", "argv": ["train.py", *args], "environ": {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")},
            "interventions": [{"name": n, "params": p} for n, p in interventions]}


def test_a_process_that_loaded_every_graph_takes_the_cold_compile_of_the_one_that_made_them(tmp_path):
    cold = {"compile_s": 42.0, "compile_cache": {"hits": 0, "misses": 2}}
    compile_book.settle(cold, _spec(tmp_path, ("torch-compile", {"mode": "default"}), ("amp", {"dtype": "bfloat16"})))
    assert "compile_cold_s" not in cold
    assert json.loads((tmp_path / "advisor-compiles.json").read_text()) == {
        compile_book.graphs_key(_spec(tmp_path, ("amp", {"dtype": "bfloat16"}), ("torch-compile", {"mode": "default"}))): 42.0}
    # the same program on top of more workers: loaded, and costed cold (fixes that feed data leave the graphs)
    loaded = {"compile_s": 6.5, "compile_cache": {"hits": 2, "misses": 0}}
    compile_book.settle(loaded, _spec(tmp_path, ("amp", {"dtype": "bfloat16"}), ("torch-compile", {"mode": "default"}),
                                      ("dataloader-workers", {"num_workers": 8})))
    assert loaded["compile_cold_s"] == 42.0
    assert measure.compile_cache_s(loaded) == 42.0 - 6.5
    # ... and under cuDNN's benchmark mode, or the data-free ceiling's cached batch: Inductor's graphs are the same
    for same in ("cudnn-benchmark", "cached-batch"):
        ceiling = {"compile_s": 5.0, "compile_cache": {"hits": 2, "misses": 0}}
        compile_book.settle(ceiling, _spec(tmp_path, ("torch-compile", {"mode": "default"}), ("amp", {"dtype": "bfloat16"}), (same, {})))
        assert ceiling["compile_cold_s"] == 42.0


def test_other_programs_other_arguments_and_partial_misses_are_not_given_a_cold_cost(tmp_path):
    compile_book.settle({"compile_s": 42.0, "compile_cache": {"misses": 2}}, _spec(tmp_path, ("torch-compile", {})))
    for child, spec in (
            ({"compile_s": 6.0, "compile_cache": {"hits": 2}}, _spec(tmp_path, ("torch-compile", {}), ("channels-last", {}))),
            ({"compile_s": 6.0, "compile_cache": {"hits": 2}}, _spec(tmp_path, ("torch-compile", {}), args=("--bs", "64"))),
            ({"compile_s": 30.0, "compile_cache": {"hits": 1, "misses": 1}}, _spec(tmp_path, ("torch-compile", {})))):
        compile_book.settle(child, spec)
        assert "compile_cold_s" not in child and measure.compile_cache_s(child) == 0.0
    # a partial miss compiled its stack's graphs itself: the book keeps the first cold compile
    assert list(json.loads((tmp_path / "advisor-compiles.json").read_text()).values()).count(42.0) == 1


def test_nothing_is_written_beside_a_compile_cache_that_is_the_users_own(tmp_path, monkeypatch):
    monkeypatch.delenv("ADVISOR_COMPILE_CACHE", raising=False)
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "theirs"))
    spec = {"script": "/w/train.py", "argv": ["train.py"], "environ": {}, "interventions": []}
    assert compile_book.book_path(spec) is None
    compile_book.settle({"compile_s": 42.0, "compile_cache": {"misses": 2}}, spec)
    assert list(tmp_path.iterdir()) == []


def _started(compile_s: float, waited_s: float, span_s: float = 40.0, **kw) -> dict:
    """A process whose start-up (script to its last warm-up step) took span_s of wall time,
    waited_s of it with its main thread waiting for a core."""
    at = {"script": 100.0, "first_step": 100.0 + span_s, "cpu_wait": {"script": 1.0, "first_step": 1.0 + waited_s}}
    return {"compile_s": compile_s, "startup": at, **kw}


def test_the_book_keeps_the_compile_as_the_process_own_time(tmp_path):
    """A guess that compiled niced beside another trial's start-up, waiting for a core a quarter of
    its start-up, books three quarters of its 40 s compile: the lead-in leaves its waits out, and
    so does what every process that loads the graphs is charged."""
    spec = _spec(tmp_path, ("torch-compile", {}))
    compile_book.settle(_started(40.0, 10.0, compile_cache={"misses": 2}), spec)
    assert list(json.loads((tmp_path / "advisor-compiles.json").read_text()).values()) == [30.0]
    loaded = _started(4.0, 20.0, compile_cache={"hits": 2})      # its load, half of it waiting for a core
    compile_book.settle(loaded, spec)
    assert loaded["compile_cold_s"] == 30.0
    assert measure.own_share(loaded) == 0.5 and measure.compile_cache_s(loaded) == 30.0 - 2.0
    # held or stopped time is no part of the span the share is taken over
    held = _started(4.0, 10.0, span_s=60.0, compile_cache={"hits": 2})
    held["startup"]["holds"] = [[110.0, 130.0]]
    assert measure.own_share(held) == 0.75
