"""torch.compile's caches across an analyze's processes (specs.compile_cache_env): every process
after the baseline compiles into one cache, <run_dir>/cache during the run (gone after it), or
--cache DIR, which stays, so that a second analyze loads what the first compiled. Real runs of a
script that compiles its own model with Inductor on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from advisor import measure, specs

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "fixtures" / "scripts" / "compiled_train.py"
ENV = {k: v for k, v in os.environ.items() if k not in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
ENV["PYTHONPATH"] = str(REPO)


def _analyze(out: Path, cwd: Path, *extra: str) -> dict:
    # --fix cached-batch: the one process after the repeat is the data-free ceiling's
    r = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--out", str(out), "--fix", "cached-batch",
                        "--no-verify", "--warmup", "3", "--steps", "6", "--min-time", "0", "--profile-steps", "1",
                        *extra, str(SCRIPT)], cwd=cwd, env=ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads((out / "run.json").read_text())


def test_the_processes_share_a_cache_in_the_run_directory_and_a_second_analyze_reuses_cache_dir(tmp_path):
    cache = tmp_path / "compile-cache"
    first = _analyze(tmp_path / "one", tmp_path, "--cache", str(cache))
    cold = first["measurement"]["compile_s"]   # the baseline compiled into the empty DIR
    repeat = next(t for t in first["trials"] if t["name"] == "00-baseline-repeat")
    assert cold > 0 and repeat["compile_s"] > 0
    assert first["trial_summary"]["compile_cache"] == str(cache)
    assert first["trial_summary"]["compile_s"] >= cold + repeat["compile_s"] - 0.1
    assert any((cache / "inductor").rglob("*")), "the compiled graphs stayed in --cache DIR"
    second = _analyze(tmp_path / "two", tmp_path, "--cache", str(cache))
    # the graphs were loaded, not compiled: Dynamo still traces, Inductor's work is skipped
    assert second["measurement"]["compile_s"] < 0.75 * cold, (second["measurement"]["compile_s"], cold)
    assert repeat["compile_s"] < 0.75 * cold   # in the first analyze too, the repeat loaded the baseline's
    # ... and its record says so, with the compile the user's run pays (the book beside the graphs)
    assert repeat["compile_cache"]["hits"] > 0 and repeat["compile_cache"]["misses"] == 0
    # the book keeps the compile as the baseline's own time: its seconds less its share of
    # waiting for a core (measure.own_share; 1 on an idle host)
    book = json.loads((cache / "advisor-compiles.json").read_text())
    own = round(cold * measure.own_share(json.loads((tmp_path / "one" / "child.json").read_text())), 3)
    assert list(book.values()) == [own] and 0 < own <= round(cold, 3)
    again = next(t for t in second["trials"] if t["name"] == "00-baseline-repeat")
    assert repeat["compile_cold_s"] == again["compile_cold_s"] == own
    # without --cache the processes' cache lives in the run directory and goes with the run
    third = _analyze(tmp_path / "three", tmp_path)
    assert "compile_cache" not in third["trial_summary"] and not (tmp_path / "three" / "cache").exists()
    assert third["trial_summary"]["wall_s"] > 0 and third["trial_summary"]["compile_s"] > 0
    phases = third["trial_summary"]["phases_s"]   # where the wall time went, adding up to it
    assert set(phases) == {"baseline", "trials", "patch"} and phases["baseline"] > 0 and phases["trials"] > 0
    assert abs(sum(phases.values()) - third["trial_summary"]["wall_s"]) <= 0.3


def test_a_trial_spec_points_the_compile_caches_into_the_run_directory(tmp_path, monkeypatch):
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    spec = specs.trial_spec("train.py", [], tmp_path, specs.AnalyzeOptions(), "01-amp", [])
    samples = {"ADVISOR_SAMPLES_CACHE": str(tmp_path / "cache" / "samples")}   # this run's alone, whatever
    assert spec["environ"] == {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache" / "inductor"),
                               "TRITON_CACHE_DIR": str(tmp_path / "cache" / "triton"), **samples}
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/somewhere/theirs")   # the user's own (or --cache's)
    assert specs.trial_spec("train.py", [], tmp_path, specs.AnalyzeOptions(), "01-amp", [])["environ"] == samples
