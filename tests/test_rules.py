"""The rule catalogue: shape of every rule, and its behaviour on real GPU traces.

Every rule names hit cases and labelled non-hit cases. A case is either a real trace
fixture (tests/fixtures/traces/<name>.pt.trace.json.gz, no observed config) or a JSON file
in tests/fixtures/rule_cases/ pairing such a trace with an observed config.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from advisor import engine
from advisor.metrics import analyze
from advisor.trace import load_trace
from advisor.trials.candidates import expand

FIX = Path(__file__).parent / "fixtures"
TRACES = FIX / "traces"
CASES = FIX / "rule_cases"
SNAPSHOT = CASES / "snapshot.json"

RULES = engine.load_rules()


def case_names() -> list[str]:
    names = {p.name.removesuffix(".pt.trace.json.gz") for p in TRACES.glob("*.pt.trace.json.gz")}
    names |= {p.stem for p in CASES.glob("*.json") if p.name != "snapshot.json"}
    return sorted(names)


@functools.cache
def _model(trace: str):
    model = load_trace(TRACES / f"{trace}.pt.trace.json.gz")
    return model, analyze(model)


REPO = Path(__file__).resolve().parent.parent


@functools.cache
def _run_model(run: str, trial: str | None = None):
    """A recorded GPU run (tests/fixtures/runs/...): the trace, config and environment of its
    baseline, or of one of its trials, with what the child measured merged as the CLI does."""
    from advisor.results import merge_child_results

    root = REPO / run
    child_path = root / "trials" / trial / "child.json" if trial else root / "child.json"
    child = json.loads(child_path.read_text()) if child_path.exists() else {}
    if trial:
        trace, config, env = child["trace_files"][-1], child["config"], child["environment"]
    else:
        doc = json.loads((root / "run.json").read_text())
        trace, config, env = doc["traces"]["baseline"][-1], doc["config"], doc["environment"]
    model = load_trace(root / trace)
    analysis = analyze(model)
    merge_child_results(analysis, child)
    return model, analysis, config, env


@functools.cache
def load_case(name: str) -> dict:
    path = CASES / f"{name}.json"
    case = json.loads(path.read_text()) if path.exists() else {"trace": name, "config": {}, "environment": {}}
    if "run" in case:
        model, analysis, config, env = _run_model(case["run"], case.get("trial"))
        return {"model": model, "analysis": analysis, "config": config, "environment": env, "extra": []}
    model, analysis = _model(case["trace"])
    extra = [_model(t)[0] for t in case.get("extra_traces", [])]
    return {"model": model, "analysis": analysis, "config": case.get("config") or {},
            "environment": case.get("environment") or {}, "extra": extra}


def run_case(name: str, rules=None, thresholds=None):
    c = load_case(name)
    return engine.run_rules(c["model"], c["analysis"], config=c["config"], environment=c["environment"],
                            extra_models=c["extra"], rules=rules, thresholds=thresholds)


# --- the catalogue's shape -------------------------------------------------------------

def test_codes_unique_and_well_formed():
    codes = [r.code for r in RULES]
    assert len(codes) == len(set(codes))
    assert len(RULES) >= 14
    for r in RULES:
        assert re.fullmatch(r"ADV\d{3}", r.code), r.code
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", r.name), r.name
        assert r.severity in engine.SEVERITIES
        assert set(r.needs) <= set(engine.NEEDS_REASONS), r.needs


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_docstring_has_every_section(rule):
    sections = engine.parse_doc_sections(rule.doc)
    missing = [s for s in engine.DOC_SECTIONS if not sections.get(s)]
    assert not missing, f"{rule.code} lacks {missing}"


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.code)
def test_every_rule_has_hit_and_labelled_non_hit_fixtures(rule):
    known = set(case_names())
    assert rule.hits, f"{rule.code} has no hit fixture"
    assert rule.non_hits, f"{rule.code} has no non-hit fixture"
    for name in [*rule.hits, *rule.non_hits]:
        assert name in known, f"{rule.code}: fixture {name!r} does not exist"
    for name, label in rule.non_hits.items():
        assert isinstance(label, str) and label.strip(), f"{rule.code}: non-hit {name} needs a label"


# --- behaviour on real traces ----------------------------------------------------------

HIT_PARAMS = [(r, c) for r in RULES for c in r.hits]
NON_HIT_PARAMS = [(r, c) for r in RULES for c in r.non_hits]


@pytest.mark.parametrize("rule,case", HIT_PARAMS, ids=lambda x: getattr(x, "code", x))
def test_rule_hits(rule, case):
    findings, skipped = run_case(case, rules=[rule])
    assert not skipped, f"{rule.code} skipped on {case}: {skipped}"
    assert findings, f"{rule.code} should fire on {case}"
    f = findings[0]
    assert f["message"] and f["evidence"], f
    assert f["fix"] is not None
    if rule.fix:
        assert f["fix"]["intervention"] == rule.fix
        assert "changes_numerics" in f["fix"] and f["fix"].get("code")


@pytest.mark.parametrize("rule,case", NON_HIT_PARAMS, ids=lambda x: getattr(x, "code", x))
def test_rule_non_hits(rule, case):
    findings, _ = run_case(case, rules=[rule])
    assert not findings, f"{rule.code} must not fire on {case} ({rule.non_hits[case]}): {findings[0]['message']}"


def test_findings_snapshot():
    """The codes each case produces, in rank order. Regenerate with ADVISOR_UPDATE_SNAPSHOT=1."""
    import os

    got = {name: [f["code"] for f in run_case(name)[0]] for name in case_names()}
    if os.environ.get("ADVISOR_UPDATE_SNAPSHOT") or not SNAPSHOT.exists():
        SNAPSHOT.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
    assert got == json.loads(SNAPSHOT.read_text())


# What the slow recipe does wrong and the tuned recipe fixes (examples/cifar_resnet*.py).
SLOW_RECIPE = ("ADV101", "ADV102", "ADV103", "ADV104", "ADV106", "ADV107", "ADV108", "ADV110")


def test_slow_gpu_run_has_the_expected_ranked_findings():
    slow, _ = run_case("gpu_run_cifar_slow")
    codes = [f["code"] for f in slow]
    for expected in SLOW_RECIPE:
        assert expected in codes, (expected, codes)
    gains = [f["estimated_gain_ms"] for f in slow if f["estimated_gain_ms"] is not None]
    assert gains == sorted(gains, reverse=True)
    # the data loader (single process, per-sample float conversion) is the largest cost measured
    assert max(slow, key=lambda f: f["estimated_gain_ms"] or 0)["code"] in ("ADV103", "ADV109", "ADV110")
    by_code = {f["code"]: f for f in slow}
    assert by_code["ADV103"]["severity"] == "error"  # > 20% of the step (XProf's input-bound line)
    assert any("examples/cifar_resnet.py:" in ((f["fix"] or {}).get("where") or "") for f in slow)


def test_tuned_gpu_run_has_none_of_the_slow_recipe_findings():
    tuned, _ = run_case("gpu_run_cifar_tuned")
    codes = {f["code"] for f in tuned}
    assert not codes & set(SLOW_RECIPE), codes
    # Known and real: at batch 256 of 32x32 images the eager tuned recipe this case records
    # is launch-bound on an H200 (GPU busy ~8-10%), so ADV109 warns on it.
    assert {f["code"] for f in tuned if f["severity"] in ("warning", "error")} <= {"ADV109"}


def test_tuned_h100_run_has_none_of_the_slow_recipe_findings():
    tuned, _ = run_case("gpu_run_h100_cifar_tuned")
    codes = {f["code"] for f in tuned}
    assert not codes & (set(SLOW_RECIPE) | {"ADV117"}), codes
    # The eager tuned recipe this case records: at batch 2048 on an H100 its step is CPU-bound
    # (GPU busy 31% in the profiled steps), so ADV109 warns; the control now uses CUDA graphs.
    assert {f["code"] for f in tuned if f["severity"] in ("warning", "error")} <= {"ADV109"}


def test_tuned_control_has_no_warning_on_an_h100():
    """The control's bar: as cifar_resnet_tuned.py is written now (its data on the
    GPU, CUDA graphs), gets nothing at warning or above from a real H100 run."""
    tuned, _ = run_case("gpu_run_h100_cifar_tuned_graphs")
    assert not [f["code"] for f in tuned if f["severity"] in ("warning", "error")], tuned
    assert not {f["code"] for f in tuned} & (set(SLOW_RECIPE) | {"ADV103", "ADV109", "ADV117", "ADV118"})


def test_host_syncs_are_trialled_only_where_the_script_calls_item_and_the_host_waits_in_them():
    """ADV110 proposes the defer-syncs trial when the syncs are .item() calls the runner saw
    the script make on a device tensor (from a bare trace it can only suggest), and when the
    host waits in them: on an eager step that keeps the host busy throughout (0.02 ms blocked
    a step) deferring cannot show yet (three trials there gained nothing on an H100);
    compiled with CUDA graphs, the same calls blocked the host 0.69 ms a step and deferring
    them gave 4.63 -> 3.69 ms. On another host the profiled compiled step blocked only 0.15 ms
    (the profiler slows the host), and an estimate from that alone kept the trial away."""
    from advisor.trials.candidates import candidates_from_findings

    def adv110(case):
        return [f for f in run_case(case)[0] if f["code"] == "ADV110"][0]

    bare = adv110("sync_item")
    assert bare["fix"]["intervention"] == "defer-syncs" and bare["fix"].get("suggest_only")
    assert candidates_from_findings([bare], {"gpu_count": 1}, None) == []
    host_bound = adv110("sync_item_observed_config")
    assert host_bound["fix"].get("suggest_only") and host_bound["severity"] == "info"
    assert "host is busy for the whole step" in host_bound["message"] and host_bound["estimated_gain_ms"] < 0.1
    assert any("train.py:88" in e for e in host_bound["evidence"])
    for case in ("gpu_run_h100_compiled_item_syncs", "gpu_run_h100_compiled_item_syncs_b"):
        compiled = adv110(case)
        assert compiled["severity"] == "warning" and not compiled["fix"].get("suggest_only"), case
        assert compiled["fix"]["where"] == "examples/cifar_resnet.py:146"
        # the timed step's excess over the GPU's busy time: 0.92 and 0.87 ms (deferring gave 0.94)
        assert 0.7 < compiled["estimated_gain_ms"] < 1.0, (case, compiled["estimated_gain_ms"])
        assert [c.name for c in candidates_from_findings([compiled], {"gpu_count": 1}, None)] == ["defer-syncs"]


def test_host_syncs_read_the_hosts_waits_from_the_timed_window_when_the_runner_timed_them():
    """The profiler slows the host: on a slower H100 host the profiled compiled step was blocked
    only 0.02 ms in its .item() calls and defer-syncs was never trialled (4.89 ms kept against
    the control's 3.78). The runner now times .item() on device tensors in the timed window;
    that run predates it, so the figures given here stand in for what it records (a compiled
    step waits milliseconds there, an eager host-bound one hundredths)."""
    from advisor import engine

    c = load_case("gpu_run_h100_compiled_item_syncs_slow_host")

    def adv110(item_wait_ms=None):
        analysis = json.loads(json.dumps(c["analysis"]))
        if item_wait_ms is not None:
            analysis["measured"]["item_wait_ms_per_step"] = item_wait_ms
        found, _ = engine.run_rules(c["model"], analysis, config=c["config"], environment=c["environment"])
        return next(f for f in found if f["code"] == "ADV110")

    profiled_only = adv110()
    assert profiled_only["fix"].get("suggest_only") and "0.02 ms" in profiled_only["message"]
    waited = adv110(2.0)
    assert waited["severity"] == "warning" and not waited["fix"].get("suggest_only")
    assert 0.8 < waited["estimated_gain_ms"] < 1.1  # 4.89 ms timed against 3.92 ms of GPU busy
    assert any("timed window: 2.00 ms" in e for e in waited["evidence"])
    host_bound = adv110(0.02)
    assert host_bound["fix"].get("suggest_only")


def test_amp_never_advised_when_autocast_is_on():
    for case in ("amp_bf16_nchw", "amp_fp16_scaler_config", "fp32_nchw_autocast_config"):
        assert "ADV101" not in [f["code"] for f in run_case(case)[0]], case


def test_rules_needing_config_are_skipped_with_reason_on_bare_traces():
    _, skipped = run_case("fp32_nchw")
    reasons = {s["code"]: s["reason"] for s in skipped}
    assert "ADV114" in reasons and "configuration" in reasons["ADV114"]


def test_user_rules_directory_loads_the_same_way(tmp_path):
    (tmp_path / "my_rule.py").write_text(
        '"""Custom.\n\nWhat it does:\n  x\nWhy is this bad:\n  x\nExample:\n  x\nFix:\n  x\nFix safety:\n  x\n"""\n'
        'CODE = "USR001"\nNAME = "always"\nSEVERITY = "info"\nNEEDS = ()\nFIX = None\n'
        'def check(ctx):\n    return {"message": "step %.1f ms" % ctx.analysis["step_time_ms"]}\n')
    rules = engine.load_rules([str(tmp_path)])
    assert "USR001" in [r.code for r in rules]
    findings, _ = run_case("fp32_nchw", rules=[r for r in rules if r.code == "USR001"])
    assert findings[0]["message"].startswith("step ")


def test_thresholds_are_configurable(monkeypatch):
    from advisor.thresholds import Thresholds

    assert "ADV103" in [f["code"] for f in run_case("slow_loader")[0]]
    high = Thresholds.from_overrides(["data_wait_frac=0.95"])
    assert "ADV103" not in [f["code"] for f in run_case("slow_loader", thresholds=high)[0]]
    # the environment variable is read where the command line is, once, never by the rules
    monkeypatch.setenv("ADVISOR_THRESHOLDS", "data_wait_frac=0.95")
    assert "ADV103" in [f["code"] for f in run_case("slow_loader")[0]]
    assert Thresholds.from_environment([]).data_wait_frac == 0.95
    assert Thresholds.from_environment(["data_wait_frac=0.5"]).data_wait_frac == 0.5   # the flag comes last
    with pytest.raises(ValueError, match="unknown threshold"):
        Thresholds.from_overrides(["no_such=1"])


@pytest.mark.parametrize("transforms,cpus,fix", [
    (None, 16, ("preload-dataset", None)),
    ("Compose( RandomResizedCrop(size=(224, 224)) ToTensor() )", 16, ("dataloader-workers", 8)),
    ("Compose( ColorJitter(brightness=0.4) )", 6, ("dataloader-workers", 6)),
    ("Compose( RandomHorizontalFlip(p=0.5) )", 4, ("preload-dataset", None)),  # no cores left: the trial's check refuses
])
def test_loader_waits_with_random_transforms_ask_for_more_workers(transforms, cpus, fix):
    """ADV118 on an H100 run whose 4 workers left the loop waiting: stored samples cannot be
    the fix where the dataset's transforms are random (an ImageFolder recipe's random crops):
    twice the workers are, up to the host's cores."""
    c = load_case("gpu_run_h100_cifar_workers")
    dl = c["config"]["dataloader"]
    config = {**c["config"], "dataloader": {**dl, "value": {**dl["value"], "transforms": transforms}}}
    findings, _ = engine.run_rules(c["model"], c["analysis"], config=config,
                                   environment={**c["environment"], "cpu_count": cpus},
                                   rules=[r for r in RULES if r.code == "ADV118"])
    (f,) = findings
    assert (f["fix"]["intervention"], f["fix"]["params"].get("num_workers")) == fix
    assert ("random transforms" in " ".join(f["evidence"])) is (fix[1] is not None)
    if fix[1]:
        (cand,) = expand(f["fix"], "ADV118", f["estimated_gain_ms"], {"gpu_count": 1, "cpu_count": cpus})
        assert cand.params == {"num_workers": fix[1], "pin_memory": True}


def test_the_rule_catalogue_page_is_generated_from_the_docstrings():
    """docs/rules.md is benchmarks/rules_doc.py's output over the built-in rules: a rule whose
    docstring changed without the page being regenerated fails here."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "rules_doc.py"), "--check"],
                       capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stdout + r.stderr
    text = (REPO / "docs" / "rules.md").read_text()
    for rule in RULES:
        assert f"{rule.code}" in text and rule.name in text


def test_decode_bound_loader_evidence_measures_the_workers_against_the_model():
    """ADV119 on the H200 ImageFolder run with 16 workers: a sample's measured cost bounds what
    the workers make (5,882 samples/s; 5,506 were measured), under what the model consumes
    between waits (11,423; DALI then stepped at 11,242), and each transform's DALI operator."""
    findings, _ = run_case("imagefolder_workers16_h200", rules=[r for r in RULES if r.code == "ADV119"])
    (f,) = findings
    text = "\n".join(f["evidence"])
    assert "num_workers=16 on 16 CPU cores" in text and "20,000 files" in text
    assert re.search(r"16 workers make at most 5,\d{3} samples/s; the model consumes 11,\d{3} samples/s", text)
    assert "RandomResizedCrop -> fn.decoders.image_random_crop + fn.resize" in text
    assert f["fix"]["intervention"] == "dali" and not f["fix"].get("suggest_only")
