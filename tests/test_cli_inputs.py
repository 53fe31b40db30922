"""Command-line inputs (issue 27, "Inputs"): a count or a time out of range is a usage error (one
line from argparse, exit 2, nothing run or created); a run directory advisor cannot create or write
is one line naming it, before anything runs; `inspect` and `report` answer bad files in one line."""

from __future__ import annotations

import contextlib
import io
import os
from pathlib import Path

import pytest

from advisor.cli import _parser, main

FIXTURES = Path(__file__).parent / "fixtures"
SCRIPT = FIXTURES / "scripts" / "tiny_train.py"


def run_cli(argv: list[str]) -> tuple[int, str]:
    out, err = io.TextIOWrapper(io.BytesIO(), encoding="utf-8"), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, err.getvalue()


@pytest.fixture
def here(tmp_path, monkeypatch):
    """A scratch working directory where the default reports/ would go."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("ADVISOR_REPORTS", str(tmp_path / "reports"))
    return tmp_path


BAD = [
    ("--steps", "0"), ("--steps", "-3"), ("--steps", "2.5"), ("--steps", "ten"),
    ("--profile-steps", "0"), ("--profile-steps", "-1"),
    ("--warmup", "-1"),
    ("--min-time", "-0.5"), ("--min-time", "nan"), ("--min-time", "inf"),
    ("--timeout", "0"), ("--timeout", "-1"), ("--timeout", "nan"), ("--timeout", "1e300"),
    ("--step-timeout", "0"), ("--step-timeout", "-5"),
    ("--stall-timeout", "0"), ("--stall-timeout", "-1"), ("--stall-timeout", "inf"),
    ("--trial-timeout", "0"), ("--trial-timeout", "-1"),
    ("--budget", "0"), ("--budget", "-1"), ("--budget", "nan"),
    ("--max-trials", "0"), ("--max-trials", "-2"), ("--max-trials", "99999999999"),
    ("--lookahead", "-1"),
    ("--nproc-per-node", "0"), ("--nproc-per-node", "-1"),
]


@pytest.mark.parametrize("option,value", BAD)
def test_out_of_range_option_is_a_usage_error(here, option, value):
    for argv in (["analyze", option, value, str(SCRIPT)], ["analyze", f"{option}={value}", str(SCRIPT)]):
        rc, err = run_cli(argv)
        assert rc == 2, (argv, err)
        assert "Traceback" not in err
        lines = [x for x in err.splitlines() if "error:" in x]
        assert len(lines) == 1 and f"argument {option}:" in lines[0], err
        assert value in lines[0] or "number" in lines[0], err
    assert not (here / "reports").exists()  # nothing created, nothing run


@pytest.mark.parametrize("option,value,expected", [
    ("--warmup", "0", 0), ("--lookahead", "0", 0), ("--min-time", "0", 0.0), ("--steps", "1", 1),
    ("--profile-steps", "1", 1), ("--budget", "0.5", 0.5), ("--timeout", "1e3", 1000.0), ("--nproc-per-node", "2", 2),
])
def test_zero_where_it_means_none_and_small_values_are_accepted(option, value, expected):
    ns = _parser().parse_args(["analyze", option, value, "train.py"])
    assert getattr(ns, option[2:].replace("-", "_")) == expected


def test_defaults_pass_their_own_checks():
    ns = _parser().parse_args(["analyze", "train.py"])
    assert (ns.warmup, ns.steps, ns.profile_steps, ns.min_time, ns.max_trials) == (5, 20, 3, 1.0, 16)
    assert ns.lookahead is None and ns.stall_timeout is None


@pytest.mark.parametrize("value", ["0", "-1", "nan", "11", "x"])
def test_compare_fail_below_out_of_range(tmp_path, value):
    rc, err = run_cli(["compare", str(tmp_path), str(tmp_path), "--fail-below", value])
    assert rc == 2 and "argument --fail-below:" in err and "Traceback" not in err


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "1e400"])
def test_threshold_value_must_be_a_finite_number(value):
    trace = FIXTURES / "traces" / "ddp_cpu_exposed_rank0.pt.trace.json.gz"
    rc, err = run_cli(["inspect", str(trace), "--threshold", f"optimizer_kernels_per_step={value}"])
    assert rc == 2 and "optimizer_kernels_per_step" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


# --- the run directory ---------------------------------------------------------------------------

def _one_line_naming(err: str, path: Path) -> None:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("advisor:") and str(path) in lines[0], err


def test_out_under_a_regular_file_fails_before_anything_runs(here):
    (here / "plain").write_text("not a directory")
    out = here / "plain" / "run"
    rc, err = run_cli(["analyze", "--out", str(out), "--no-trials", str(SCRIPT)])
    assert rc == 1
    _one_line_naming(err, out)
    assert (here / "plain").read_text() == "not a directory"


def test_out_naming_a_regular_file(here):
    (here / "plain").write_text("x")
    rc, err = run_cli(["analyze", "--out", str(here / "plain"), "--no-trials", str(SCRIPT)])
    assert rc == 1
    _one_line_naming(err, here / "plain")


def test_reports_root_under_a_regular_file(here, monkeypatch):
    (here / "plain").write_text("x")
    monkeypatch.setenv("ADVISOR_REPORTS", str(here / "plain" / "reports"))
    rc, err = run_cli(["analyze", "--no-trials", str(SCRIPT)])
    assert rc == 1
    _one_line_naming(err, here / "plain" / "reports")


def test_out_read_only_empty_directory(here):
    if os.geteuid() == 0:
        pytest.skip("root writes into a read-only directory")
    ro = here / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        rc, err = run_cli(["analyze", "--out", str(ro), "--no-trials", str(SCRIPT)])
    finally:
        ro.chmod(0o700)
    assert rc == 1
    _one_line_naming(err, ro)
    assert not any(ro.iterdir())


def test_report_that_cannot_write_its_page(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_bytes((FIXTURES / "runs" / "cifar_tuned_h200" / "run.json").read_bytes())
    (run / "index.html").mkdir()  # in the way, whoever runs the test
    rc, err = run_cli(["report", str(run)])
    assert rc == 1
    _one_line_naming(err, run / "index.html")


@pytest.mark.parametrize("content,needle", [
    (b"", "not valid JSON"), (b"[1, 2]", "not a run document (a JSON array"), (b"{", "not valid JSON"),
    (b"\xff\xfe garbage", "not valid JSON"), (b'"text"', "a JSON string"),
])
def test_report_bad_run_json_is_one_line(tmp_path, content, needle):
    (tmp_path / "run.json").write_bytes(content)
    rc, err = run_cli(["report", str(tmp_path)])
    assert rc == 1 and needle in err, err
    _one_line_naming(err, tmp_path / "run.json")


@pytest.mark.parametrize("name", ["x[/]y.pt.trace.json", "x[bold]y.pt.trace.json"])
def test_a_path_with_brackets_is_printed_as_it_is(tmp_path, name):
    """Paths were read as rich markup: '[/]' raised MarkupError, '[bold]' vanished from the message."""
    path = tmp_path / name
    for target in (path, tmp_path / name.replace(".pt.trace.json", "")):
        rc, err = run_cli(["inspect", str(target)])
        assert rc == 1 and "Traceback" not in err
        _one_line_naming(err, target)
    path.parent.mkdir(parents=True, exist_ok=True)  # "x[/]y": the file "]y..." in the directory "x["
    path.write_bytes(b"{}")
    rc, err = run_cli(["inspect", str(path)])
    assert rc == 1
    _one_line_naming(err, path)
