"""`advisor compare BASE NEW --fail-below X`: the throughput gate for CI, and `advisor --version`."""

from __future__ import annotations

import json

import pytest

import advisor as advisor_pkg
from tests.test_cli import advisor


def _run(tmp_path, name, samples_per_s=None, step_time_ms=None, status="complete", measurement=True):
    run_dir = tmp_path / name
    run_dir.mkdir()
    doc = {"status": status, "command": {"argv": ["train.py"]}}
    if measurement:
        doc["measurement"] = {"samples_per_s": samples_per_s, "step_time_ms": step_time_ms, "batch_size": 64}
    if status != "complete":
        doc["incomplete_reasons"] = ["the script exited with code 1 before its first step"]
    (run_dir / "run.json").write_text(json.dumps(doc))
    return run_dir


@pytest.fixture
def runs(tmp_path):
    base = _run(tmp_path, "base", samples_per_s=1356.0, step_time_ms=47.2)
    return tmp_path, base


def test_gate_passes_at_or_above_the_threshold(runs):
    tmp, base = runs
    new = _run(tmp, "new", samples_per_s=1300.0, step_time_ms=49.2)
    r = advisor("compare", base, new, "--fail-below", "0.95")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert line == "gate: NEW 1,300 samples/s is 0.96x BASE 1,356 (at or above 0.95): pass"
    assert not list(tmp.glob("*.html"))  # no page without --out


def test_gate_passes_exactly_at_the_threshold(tmp_path):
    base = _run(tmp_path, "base", samples_per_s=1000.0, step_time_ms=64.0)
    new = _run(tmp_path, "new", samples_per_s=950.0, step_time_ms=67.4)
    r = advisor("compare", base, new, "--fail-below", "0.95")
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith(": pass")


def test_gate_fails_below_the_threshold_with_exit_3(runs):
    tmp, base = runs
    new = _run(tmp, "new", samples_per_s=1234.0, step_time_ms=51.9)
    r = advisor("compare", base, new, "--fail-below", "0.95")
    assert r.returncode == 3, r.stdout + r.stderr
    assert r.stdout.strip() == "gate: NEW 1,234 samples/s is 0.91x BASE 1,356 (below 0.95): FAIL"


def test_gate_ratio_never_rounds_onto_the_threshold(tmp_path):
    base = _run(tmp_path, "base", samples_per_s=10000.0, step_time_ms=6.4)
    new = _run(tmp_path, "new", samples_per_s=9496.0, step_time_ms=6.7)
    r = advisor("compare", base, new, "--fail-below", "0.95")
    assert r.returncode == 3
    assert "is 0.9496x BASE" in r.stdout and "(below 0.95): FAIL" in r.stdout


def test_gate_with_out_still_writes_the_page(runs):
    tmp, base = runs
    new = _run(tmp, "new", samples_per_s=1234.0, step_time_ms=51.9)
    out = tmp / "pages" / "compare.html"
    r = advisor("compare", base, new, "--fail-below", "0.95", "--out", out)
    assert r.returncode == 3, r.stderr
    assert "FAIL" in r.stdout
    assert out.is_file() and out.stat().st_size > 0


def test_gate_json(runs):
    tmp, base = runs
    new = _run(tmp, "new", samples_per_s=1234.0, step_time_ms=51.9)
    r = advisor("compare", base, new, "--fail-below", "0.95", "--json")
    assert r.returncode == 3, r.stderr
    res = json.loads(r.stdout)  # stdout is the JSON alone; the gate line goes to stderr
    assert "FAIL" in r.stderr
    assert res["base"] == {"run_dir": str(base), "samples_per_s": 1356.0, "step_time_ms": 47.2}
    assert res["new"] == {"run_dir": str(new), "samples_per_s": 1234.0, "step_time_ms": 51.9}
    assert res["ratio"] == pytest.approx(1234.0 / 1356.0)
    assert res["threshold"] == 0.95 and res["unit"] == "samples/s" and res["passed"] is False

    r = advisor("compare", base, new, "--fail-below", "0.9", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["passed"] is True


def test_json_without_a_gate(runs):
    tmp, base = runs
    new = _run(tmp, "new", samples_per_s=1234.0, step_time_ms=51.9)
    r = advisor("compare", base, new, "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["threshold"] is None and res["passed"] is None and res["ratio"] < 1


def test_gate_falls_back_to_steps_per_s_for_both_runs(runs):
    tmp, base = runs
    new = _run(tmp, "new", samples_per_s=None, step_time_ms=50.0)  # batch size unknown
    r = advisor("compare", base, new, "--fail-below", "0.95")
    # 20.0 steps/s against 1000 / 47.2 = 21.19: 0.944x
    assert r.returncode == 3, r.stdout + r.stderr
    line = r.stdout.strip()
    assert len(line.splitlines()) == 1
    assert line.startswith("gate: NEW 20.0 steps/s is 0.94x BASE 21.2 (below 0.95): FAIL")
    assert "NEW has no samples/s" in line

    r = advisor("compare", base, new, "--fail-below", "0.9", "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["unit"] == "steps/s" and res["passed"] is True
    assert res["ratio"] == pytest.approx(47.2 / 50.0)
    assert res["new"]["samples_per_s"] is None


@pytest.mark.parametrize("kind", ["incomplete", "no-measurement"])
def test_gate_on_an_unusable_run_is_one_line_exit_1(runs, kind):
    tmp, base = runs
    if kind == "incomplete":
        new = _run(tmp, "new", status="incomplete")
    else:
        new = _run(tmp, "new", measurement=False)
    r = advisor("compare", base, new, "--fail-below", "0.95")
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1
    assert "NEW" in r.stderr and ("not a complete run" in r.stderr or "no measurement" in r.stderr)


def test_gate_on_a_missing_run_is_exit_1(runs):
    tmp, base = runs
    r = advisor("compare", base, tmp / "nope", "--fail-below", "0.95")
    assert r.returncode == 1
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("value", ["0", "-0.5", "11", "nan", "x"])
def test_fail_below_out_of_range_is_a_usage_error(runs, value):
    tmp, base = runs
    new = _run(tmp, "new", samples_per_s=1300.0, step_time_ms=49.2)
    r = advisor("compare", base, new, f"--fail-below={value}")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "--fail-below" in r.stderr


def test_compare_without_options_prints_the_comparison(runs):
    """No --out, --fail-below or --json: the comparison on the terminal, exit 0, no page written
    (tests/test_terminal_output.py reads it on real runs)."""
    tmp, base = runs
    new = _run(tmp, "new", samples_per_s=1300.0, step_time_ms=49.2)
    r = advisor("compare", base, new)
    assert r.returncode == 0, r.stderr
    assert "1,356" in r.stdout and "1,300" in r.stdout and "0.96x" in r.stdout
    assert "new runs at 0.96x the samples/s of base (slower)." in r.stdout
    assert not list(tmp.rglob("*.html"))


def test_version():
    r = advisor("--version")
    assert r.returncode == 0, r.stderr
    line = r.stdout.strip()
    assert line.startswith(f"advisor {advisor_pkg.__version__}")
    assert len(line.splitlines()) == 1
