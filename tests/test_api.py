"""The notebook API (advisor.api): saved runs and inspected traces as typed results.

The runs are committed H100 runs (reports/examples/*-ceiling-mfu-h100), their run.json copied
alone into a temporary directory so that nothing else of the example is needed; the trace is a
committed H200 fixture.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import advisor
from advisor.api import Finding, Findings, Inspection, Patch, Roofline, Run, Trial, Trials

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "reports" / "examples"
CIFAR = EXAMPLES / "cifar_resnet-ceiling-mfu-h100"            # cifar_resnet: loader-bound, data-free ceiling
PRELOAD = EXAMPLES / "mnist_pil_transforms-ceiling-mfu-h100"  # MNIST through PIL transforms: preload first
TRACES = REPO / "tests" / "fixtures" / "traces"
FP32 = TRACES / "fp32_nchw.pt.trace.json.gz"

CIFAR_TRIALS = [
    ("00-baseline-repeat", "reference"), ("01-dataloader-workers-8", "accepted"), ("02-preload-dataset", "accepted"),
    ("03-channels-last+amp", "accepted"), ("04-fused-optimizer+set-to-none+cudnn-benchmark", "accepted"),
    ("05-defer-syncs", "rejected"), ("06-torch-compile-reduce-overhead", "accepted"), ("07-defer-syncs", "accepted"),
    ("apart-batch-size-x2", "measured"), ("apart-batch-size-x4", "measured"), ("ceiling-data-free", "bound"),
]
PRELOAD_TRIALS = [
    ("00-baseline-repeat", "reference"), ("01-preload-dataset", "accepted"), ("02-channels-last+amp", "accepted"),
    ("03-cudnn-benchmark", "accepted"), ("04-torch-compile-reduce-overhead", "accepted"),
    ("05-dataloader-workers-8", "accepted"), ("apart-batch-size-x2", "measured"), ("apart-batch-size-x4", "measured"),
    ("ceiling-data-free", "bound"),
]


def _copy_run(example: Path, tmp_path: Path) -> tuple[Path, dict]:
    run_dir = tmp_path / example.name
    run_dir.mkdir()
    shutil.copy(example / "run.json", run_dir / "run.json")
    return run_dir, json.loads((run_dir / "run.json").read_text())


def _write_doc(tmp_path: Path, doc) -> Path:
    (tmp_path / "run.json").write_text(json.dumps(doc))
    return tmp_path


def _close(a: float, b: float, rel: float = 1e-6) -> bool:
    return abs(a - b) <= rel * max(abs(a), abs(b))


@pytest.fixture
def cifar(tmp_path) -> tuple[Run, dict]:
    run_dir, doc = _copy_run(CIFAR, tmp_path)
    return advisor.load_run(run_dir), doc


@pytest.fixture(scope="module")
def fp32() -> Inspection:
    return advisor.inspect(FP32)


# --- a saved run ---------------------------------------------------------------------------------

@pytest.mark.parametrize("example,trials", [(CIFAR, CIFAR_TRIALS), (PRELOAD, PRELOAD_TRIALS)],
                         ids=["cifar", "preload"])
def test_load_run_reads_the_committed_runs(tmp_path, example, trials):
    run_dir, doc = _copy_run(example, tmp_path)
    run = advisor.load_run(run_dir)
    assert isinstance(run, Run) and run.run_dir == run_dir
    assert run.status == "complete" and run.complete and run.incomplete_reasons == ()
    assert [(t.name, t.status) for t in run.trials] == trials
    assert all(isinstance(t, Trial) for t in run.trials) and isinstance(run.trials, Trials)
    assert run.findings.codes == [f["code"] for f in doc["findings"]]
    assert all(isinstance(f, Finding) for f in run.findings) and isinstance(run.findings, Findings)

    meas, analysis = doc["measurement"], doc["analysis"]
    assert run.step_time_ms == meas["step_time_ms"] and run.samples_per_s == meas["samples_per_s"]
    assert run.batch_size == meas["batch_size"] == 2048
    assert run.profiled_step_time_ms == analysis["step_time_ms"]
    assert run.breakdown == analysis["breakdown"]
    assert list(run.breakdown_scaled) == list(run.breakdown)
    assert _close(sum(run.breakdown_scaled.values()), meas["step_time_ms"])
    factor = analysis["step_time_ms"] / meas["step_time_ms"]
    assert _close(run.profiler_overhead, factor)
    for phase, ms in run.breakdown.items():  # scaling keeps every phase's share
        assert _close(run.breakdown_scaled[phase], ms / factor)
    assert run.kernel_time_by_class == analysis["kernel_time_by_class"]
    assert _close(sum(run.kernel_time_by_class.values()), 1.0)
    assert run.kernel_time_ms_by_class == analysis["kernel_time_ms_by_class"]
    assert run.gpu_busy_pct == analysis["gpu_busy_pct"]
    assert run.environment["gpu_name"] == "NVIDIA H100 80GB HBM3"

    roof = doc["roofline"]
    assert isinstance(run.roofline, Roofline)
    assert run.roofline.baseline_mfu == roof["baseline"]["mfu"]
    assert run.roofline.stack_mfu == roof["stack"]["mfu"]
    assert run.roofline.ceiling_mfu == roof["ceiling"]["mfu"]
    assert run.roofline.baseline_mfu < run.roofline.stack_mfu < run.roofline.ceiling_mfu
    assert run.roofline.stack_trial == roof["stack"]["trial"] == run.trials.kept[-1].name

    ver = doc["patch"]["verification"]
    assert isinstance(run.patch, Patch) and run.patch.file == run_dir / "fixes.patch"
    assert run.patch.verification_status == ver["status"] == "short"
    assert run.patch.samples_per_s == ver["samples_per_s"] and run.patch.of_stack == ver["of_stack"]
    assert len(run.patch.checks) == len(ver["checks"])


def test_cifar_run_values(cifar):
    run, doc = cifar
    assert run.findings.codes == ["ADV103", "ADV117", "ADV104", "ADV102", "ADV105", "ADV107", "ADV108", "ADV110", "ADV111"]
    wait = run.findings.get("ADV103")
    assert wait.name == "dataloader-wait" and wait.severity == "error" and wait.est_gain_ms == 77.4682
    assert wait.fix_intervention == "dataloader-workers" and wait.fix_where.endswith("cifar_resnet.py:117")
    assert wait.message == "The step waits 78.4% of its time for the next batch."
    assert wait.evidence[0] == "data wait: 77.47 ms of a 98.86 ms step (78.4%)"
    assert run.findings.get("ADV999") is None

    trial = run.trials.get("01-dataloader-workers-8")
    assert trial.fix == "dataloader-workers" and trial.params == {"num_workers": 8, "pin_memory": True}
    assert trial.samples_per_s == doc["trials"][1]["samples_per_s"] and trial.batch_size == 2048
    assert _close(trial.speedup_vs_baseline, 3.4792997386876623)
    assert run.trials.get("ceiling-data-free").ceiling and run.trials.get("ceiling-data-free").apart
    assert run.trials.get("apart-batch-size-x4").batch_size == 8192
    assert run.trials.kept.names == ["01-dataloader-workers-8", "02-preload-dataset", "03-channels-last+amp",
                                     "04-fused-optimizer+set-to-none+cudnn-benchmark",
                                     "06-torch-compile-reduce-overhead", "07-defer-syncs"]
    assert run.trials.filter(status="measured").names == ["apart-batch-size-x2", "apart-batch-size-x4"]
    assert run.trials.filter(apart=False, status=["rejected", "reference"]).names == ["00-baseline-repeat",
                                                                                      "05-defer-syncs"]
    assert _close(run.roofline.ceiling_kept_fraction, 0.980352179446144)
    # the headline in one line: where, status, the measurement, the codes and trial names
    assert repr(run).startswith(f"Run(run_dir={str(run.run_dir)!r}, status='complete', step_time_ms=73.32248,")
    assert "ADV103" in repr(run) and "07-defer-syncs" in repr(run) and "evidence" not in repr(run)


def test_findings_filters(cifar):
    run, _ = cifar
    assert run.findings.filter(severity="error").codes == ["ADV103"]
    assert run.findings.filter(severity=["error", "warning"]).codes == ["ADV103", "ADV117", "ADV104", "ADV102", "ADV107"]
    assert run.findings.filter(min_gain_ms=2.5).codes == ["ADV103", "ADV117", "ADV104"]
    # ADV110's fix (defer the .item() syncs) is suggested, never trialled
    assert run.findings.filter(trialable=False).codes == ["ADV110"]
    assert run.findings.filter(code=("ADV108", "ADV111"), severity="info").codes == ["ADV108", "ADV111"]
    assert isinstance(run.findings[:2], Findings) and run.findings[:2].codes == ["ADV103", "ADV117"]
    assert isinstance(run.trials[-1:], Trials) and run.trials[-1].name == "ceiling-data-free"


def test_load_run_takes_the_run_json_itself(tmp_path):
    run_dir, _ = _copy_run(PRELOAD, tmp_path)
    run = advisor.load_run(run_dir / "run.json")
    assert run.run_dir == run_dir and run.trials.names[1] == "01-preload-dataset"


def test_results_are_frozen(cifar):
    run, _ = cifar
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.status = "incomplete"
    with pytest.raises(dataclasses.FrozenInstanceError):
        run.findings[0].severity = "info"


def test_missing_keys_never_crash(tmp_path):
    run = advisor.load_run(_write_doc(tmp_path, {"status": "incomplete"}))
    assert run.status == "incomplete" and not run.complete and run.incomplete_reasons == ()
    assert run.environment == {} and run.script is None and run.created is None
    for name in ("step_time_ms", "samples_per_s", "batch_size", "profiled_step_time_ms", "breakdown",
                 "breakdown_scaled", "profiler_overhead", "kernel_time_by_class", "kernel_time_ms_by_class",
                 "gpu_busy_pct", "roofline", "patch"):
        assert getattr(run, name) is None, name
    assert run.findings == () and run.trials == () and run.trials.kept == ()
    assert "status='incomplete'" in repr(run)


def test_malformed_keys_read_as_absent(tmp_path):
    doc = {"status": "incomplete", "incomplete_reasons": ["stalled"], "findings": "not a list",
           "trials": [1, {"name": "01-amp", "status": "failed", "samples_per_s": "fast", "batch_size": True}],
           "measurement": {"step_time_ms": "fast", "batch_size": 64},
           "analysis": None, "roofline": {"baseline": None, "why_not": "no FLOP count"},
           "patch": {"file": None, "verification": {"status": "not applied", "error": "no anchor"}},
           "environment": ["not", "a", "dict"]}
    run = advisor.load_run(_write_doc(tmp_path, doc))
    assert run.incomplete_reasons == ("stalled",) and run.findings == () and run.environment == {}
    assert [(t.name, t.status, t.samples_per_s, t.batch_size) for t in run.trials] == [("01-amp", "failed", None, None)]
    assert run.batch_size == 64 and run.step_time_ms is None and run.breakdown is None
    assert run.roofline.baseline_mfu is None and run.roofline.why_not == "no FLOP count"
    assert run.patch.file is None and run.patch.verification_status == "not applied" and run.patch.error == "no anchor"


def test_profiled_only_run_is_not_scaled(tmp_path):
    doc = {"status": "incomplete", "analysis": {"step_time_ms": 10.0, "breakdown": {"forward": 4.0, "gpu_idle": 6.0}}}
    run = advisor.load_run(_write_doc(tmp_path, doc))
    assert run.breakdown == {"forward": 4.0, "gpu_idle": 6.0}
    assert run.breakdown_scaled is None and run.profiler_overhead is None


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", ""])
def test_unreadable_run_json_is_a_value_error(tmp_path, content):
    (tmp_path / "run.json").write_text(content)
    with pytest.raises(ValueError) as exc:
        advisor.load_run(tmp_path)
    assert "run.json" in str(exc.value) and "\n" not in str(exc.value)


def test_load_run_bad_paths(tmp_path):
    with pytest.raises(FileNotFoundError) as exc:
        advisor.load_run(tmp_path / "nowhere")
    assert str(exc.value) == f"{tmp_path / 'nowhere'}: no such file or directory"
    with pytest.raises(FileNotFoundError) as exc:
        advisor.load_run(tmp_path)
    assert str(exc.value).startswith(f"no run.json in {tmp_path}") and "\n" not in str(exc.value)


# --- tables --------------------------------------------------------------------------------------

def test_run_frames(cifar):
    pytest.importorskip("pandas")
    run, doc = cifar
    bd = run.breakdown_frame()
    assert list(bd.columns) == ["phase", "ms_profiled", "ms_scaled", "share"]
    assert list(bd["phase"]) == list(doc["analysis"]["breakdown"])
    assert _close(bd["ms_scaled"].sum(), doc["measurement"]["step_time_ms"])
    assert _close(bd["ms_profiled"].sum(), doc["analysis"]["step_time_ms"])
    assert _close(bd["share"].sum(), 1.0)
    assert _close(float(bd.set_index("phase").loc["data_wait", "share"]), 77.4682 / 98.8612)

    trials = run.to_frame()
    assert list(trials.columns) == ["name", "fix", "status", "samples_per_s", "step_time_ms", "speedup_vs_baseline",
                                    "gain_vs_previous", "batch_size", "apart", "ceiling", "reason"]
    assert list(zip(trials["name"], trials["status"])) == CIFAR_TRIALS
    assert list(trials["samples_per_s"]) == [t["samples_per_s"] for t in doc["trials"]]
    assert run.trials.to_frame().equals(trials)

    findings = run.findings_frame()
    assert list(findings["code"]) == run.findings.codes
    errors = findings[findings["severity"] == "error"]
    assert list(errors["code"]) == ["ADV103"] and float(errors["est_gain_ms"].iloc[0]) == 77.4682
    assert list(run.findings.filter(severity="info").to_frame()["code"]) == ["ADV105", "ADV108", "ADV110", "ADV111"]

    kernels = run.kernel_classes_frame().set_index("kernel_class")
    assert _close(kernels["share"].sum(), 1.0)
    assert float(kernels.loc["tc_gemm_conv", "ms_per_step"]) == doc["analysis"]["kernel_time_ms_by_class"]["tc_gemm_conv"]


def test_frames_of_an_empty_run_have_their_columns(tmp_path):
    pytest.importorskip("pandas")
    run = advisor.load_run(_write_doc(tmp_path, {"status": "incomplete"}))
    for frame, first in ((run.to_frame(), "name"), (run.findings_frame(), "code"), (run.breakdown_frame(), "phase"),
                         (run.kernel_classes_frame(), "kernel_class")):
        assert frame.empty and frame.columns[0] == first


def test_frames_without_pandas_say_how_to_get_it(cifar, fp32, monkeypatch):
    run, _ = cifar
    monkeypatch.setitem(sys.modules, "pandas", None)  # `import pandas` fails as if not installed
    for make in (run.to_frame, run.findings_frame, run.breakdown_frame, run.kernel_classes_frame,
                 run.findings.to_frame, run.trials.to_frame, fp32.to_frame, fp32.findings_frame,
                 fp32.breakdown_frame):
        with pytest.raises(ImportError) as exc:
            make()
        assert "pip install pandas" in str(exc.value) and "\n" not in str(exc.value)


# --- an inspected trace ----------------------------------------------------------------------------

def test_inspect_a_fixture_trace(fp32):
    assert isinstance(fp32, Inspection)
    assert fp32.trace == FP32 and fp32.other_ranks == () and fp32.trace_paths == (FP32,)
    assert fp32.environment["gpu_name"] == "NVIDIA H200" and fp32.environment["gpu_count"] == 1
    assert fp32.step_time_ms == 14.3426 and fp32.steps_in_trace == 1
    assert list(fp32.breakdown) == ["data_wait", "h2d", "forward", "backward", "zero_grad", "optimizer", "other",
                                    "gpu_idle"]
    assert abs(sum(fp32.breakdown.values()) - fp32.step_time_ms) < 1e-3
    assert fp32.kernel_time_by_class["gemm_conv"] > 0.5 and fp32.kernel_time_by_class["tc_gemm_conv"] < 0.01
    assert 0 < fp32.gpu_busy_pct < 100
    assert "ADV101" in fp32.findings.codes and "ADV106" in fp32.findings.codes
    assert fp32.findings.get("ADV101").fix_intervention == "amp"
    # without the run's observed config, the config rules are skipped, each with its reason
    assert {s["code"] for s in fp32.skipped_rules} >= {"ADV108", "ADV116"}


def test_inspect_matches_the_command_line(fp32):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.pop("ADVISOR_THRESHOLDS", None)
    r = subprocess.run([sys.executable, "-m", "advisor", "inspect", "--json", str(FP32)], env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    cli = json.loads(r.stdout)
    assert fp32.findings.codes == [f["code"] for f in cli["findings"]]
    assert [f.est_gain_ms for f in fp32.findings] == [f["estimated_gain_ms"] for f in cli["findings"]]
    assert fp32.step_time_ms == cli["step_time_ms"] and fp32.breakdown == cli["breakdown"]
    assert fp32.kernel_time_by_class == cli["kernel_time_by_class"]


def test_inspection_frames(fp32):
    pytest.importorskip("pandas")
    bd = fp32.breakdown_frame()
    assert list(bd.columns) == ["phase", "ms_profiled", "ms_scaled", "share"]
    assert bd["ms_scaled"].isna().all()  # nothing measured without the profiler to scale to
    assert bd["ms_scaled"].dtype == float and fp32.findings_frame()["est_gain_ms"].dtype == float
    assert _close(bd["share"].sum(), 1.0) and fp32.to_frame().equals(bd)
    assert list(fp32.findings_frame()["code"]) == fp32.findings.codes
    assert list(fp32.findings.filter(severity="info").to_frame()["code"]) == ["ADV111"]


def test_inspect_a_run_directory_uses_its_baseline_trace_and_config():
    run_dir = REPO / "tests" / "fixtures" / "runs" / "cifar_slow_h200"
    ins = advisor.inspect(run_dir)
    assert ins.trace == run_dir / "tb" / "baseline" / "vm_868.1795319707218042916.pt.trace.json.gz"
    assert "examples/cifar_resnet.py:" in ins.findings.get("ADV108").message  # a config rule ran
    assert advisor.inspect(run_dir / "run.json").findings.codes == ins.findings.codes


def test_inspect_other_ranks_finds_the_straggler():
    r0, r1 = (TRACES / f"ddp_cpu_straggler_rank{i}.pt.trace.json.gz" for i in (0, 1))
    ins = advisor.inspect(r0, other_ranks=[r1])
    assert ins.trace_paths == (r0, r1)
    straggler = ins.findings.get("ADV116")
    assert straggler is not None and straggler.message.startswith("Rank 1 is the straggler")
    assert "ADV116" not in advisor.inspect(r0).findings.codes
    with pytest.raises(ValueError, match="not distinct ranks"):
        advisor.inspect(FP32, other_ranks=[TRACES / "tf32_nchw.pt.trace.json.gz"])


def test_inspect_thresholds(monkeypatch):
    monkeypatch.delenv("ADVISOR_THRESHOLDS", raising=False)
    slow = TRACES / "slow_loader.pt.trace.json.gz"
    assert "ADV103" in advisor.inspect(slow).findings.codes
    assert "ADV103" not in advisor.inspect(slow, thresholds={"data_wait_frac": 0.99}).findings.codes
    with pytest.raises(ValueError, match="unknown threshold"):
        advisor.inspect(slow, thresholds={"bogus": 1})


def test_inspect_bad_input(tmp_path):
    with pytest.raises(FileNotFoundError) as exc:
        advisor.inspect(tmp_path / "nowhere.pt.trace.json.gz")
    assert "no such file or directory" in str(exc.value)
    with pytest.raises(FileNotFoundError) as exc:
        advisor.inspect(tmp_path)  # a directory without traces
    assert "no *.pt.trace.json" in str(exc.value) and "\n" not in str(exc.value)
    for content in (b"", b'{"hello": "world"}'):
        bad = tmp_path / "bad.json"
        bad.write_bytes(content)
        with pytest.raises(ValueError) as exc:
            advisor.inspect(bad)
        assert "bad.json" in str(exc.value) and "\n" not in str(exc.value)


# --- the package ---------------------------------------------------------------------------------

def test_import_advisor_stays_cheap():
    code = ("import advisor, sys; heavy = lambda: sorted(m for m in ('torch', 'numpy', 'pandas') if m in sys.modules); "
            "before = heavy(); advisor.load_run; advisor.Run; print(before, heavy())")
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[] []"  # nor does reaching the API load torch, numpy or pandas


def test_lazy_exports():
    assert advisor.load_run is advisor.api.load_run and advisor.inspect is advisor.api.inspect
    assert {"load_run", "inspect", "Run", "Inspection", "Finding", "Trial", "step", "__version__"} <= set(dir(advisor))
    with pytest.raises(AttributeError):
        advisor.no_such_thing  # noqa: B018
