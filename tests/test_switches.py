"""The script's own switches (advisor.patch.switches): an option whose value gates the code a
fix changes (``if args.amp:`` around the script's autocast) is turned on in the recommended
command, with no edit, and verified as plain python; where the script's form differs from
advisor's (float16 with its GradScaler against bfloat16), the ladder gets a trial of the
script's form in the same group (advisor.trials.script_forms), run with the switch on its
command line (switches.trial_args)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

from advisor import verify
from advisor.fixes import make_patch
from advisor.interventions import amp as amp_intervention
from advisor.patch import switches
from advisor.trials import script_forms
from advisor.trials.candidates import Candidate

ROOT = Path(__file__).resolve().parents[1]
HARNESS = ROOT / "tests" / "provenance_harness.py"
OWN = ROOT / "tests" / "fixtures" / "scripts" / "own_switches"

FP16 = """
    import argparse
    import torch
    import torch.nn.functional as F
    from torch import nn

    p = argparse.ArgumentParser()
    p.add_argument("--amp", action="store_true", help="float16 autocast with a GradScaler")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.LazyLinear(10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", enabled=args.amp)


    def step(x, y):
        if args.amp:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = F.cross_entropy(model(x), y)
        else:
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()


    for _ in range(args.steps):
        step(torch.randn(4, 3, 8, 8), torch.randint(0, 10, (4,)))
    """


def _baseline(root: Path, script: str, argv: list[str]) -> dict:
    """The script run as python runs it with the runner's record of its options and its lines."""
    out = root.parent / "record.json"
    proc = subprocess.run([sys.executable, str(HARNESS), str(out), script, *argv], cwd=root, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads(out.read_text())
    config = {"cli_options": {"value": rec["cli_options"], "where": None}, "input": rec["input"]}
    if rec.get("autocast"):
        config["autocast"] = rec["autocast"]
    return {"config": config, "executed_lines": rec["executed_lines"]}


def test_float16_switch_is_a_script_form_beside_advisors_bfloat16(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(textwrap.dedent(FP16).lstrip())
    child = _baseline(root, "train.py", ["--steps", "2"])
    ctx = switches.context("train.py", ["--steps", "2"], child, cwd=str(root))
    found = switches.find(ctx, "amp")
    assert [(s.test, s.form) for s in found] == [("args.amp", {"dtype": "float16", "scaler": True})], found
    plans = switches.script_forms(ctx, "amp", {"dtype": "bfloat16"})
    assert len(plans) == 1 and plans[0]["params"]["form"] == "script", plans
    params = plans[0]["params"]
    assert params["dtype"] == "float16" and params["_argv_changes"] == [{"flag": "--amp", "from": None, "to": None}]
    # the trial of the script's form: its switch on the command line, nothing applied by advisor
    spec = {"name": "amp", "params": params}
    assert switches.trial_args(["--steps", "2"], [spec]) == ["--steps", "2", "--amp"]
    assert amp_intervention.not_applicable({}, {}, params) is None     # its own GradScaler: not refused
    assert amp_intervention.not_applicable({}, {}, {"dtype": "float16"}) is not None
    # both forms in one group, the script's after advisor's: a tie keeps the script's (no edit)
    queue = script_forms.add([Candidate("amp", {"dtype": "bfloat16"}, origin="ADV002")], str(root / "train.py"),
                             ["--steps", "2"], child)
    assert [(c.params.get("form"), c.group) for c in queue] == [(None, "amp"), ("script", "amp")], queue
    # kept, the script's form is the switch on the command line and no edit
    diff, notes = make_patch(str(root / "train.py"), [{"intervention": "amp", "params": params}], child["config"],
                             cwd=str(root), executed=child["executed_lines"], argv=["--steps", "2"])
    assert notes[0]["applied"] and not diff, (notes, diff)
    assert verify.recommended_command("train.py", ["--steps", "2"], notes) == ["python", "train.py", "--steps", "2",
                                                                             "--amp"]
    # advisor's bfloat16 kept instead: the switch is turned on and its dtype is the one measured
    diff, notes = make_patch(str(root / "train.py"), [{"intervention": "amp", "params": {"dtype": "bfloat16"}}],
                             child["config"], cwd=str(root), executed=child["executed_lines"], argv=["--steps", "2"])
    assert "+        with torch.autocast(\"cpu\", dtype=torch.bfloat16):" in diff.splitlines(), diff
    assert notes[0]["argv_changes"] == [{"flag": "--amp", "from": None, "to": None}], notes


def test_no_switch_where_the_gate_ran_or_is_not_on_the_fix_path(tmp_path):
    """A switch the run already had on is nothing to turn on; a gate in a function that never
    ran is not on the run's path."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(textwrap.dedent(FP16).lstrip().replace(
        "for _ in range(args.steps):", "def evaluate(x):\n    if args.amp:\n        with torch.autocast(\"cpu\"):\n"
        "            return model(x)\n\n\nfor _ in range(args.steps):"))
    child = _baseline(root, "train.py", ["--amp", "--steps", "1"])
    ctx = switches.context("train.py", ["--amp", "--steps", "1"], child, cwd=str(root))
    assert switches.find(ctx, "amp") == []


def test_own_switches_end_to_end(tmp_path):
    """``advisor analyze --apply amp,channels-last`` on a trainer with its own --amp and
    --channels-last: the patch is no edit at all, the recommended command passes both switches,
    and the verification, run so, observes bfloat16 autocast and channels-last weights."""
    src = tmp_path / "proj"
    shutil.copytree(OWN, src)
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--no-trials", "--apply", "amp,channels-last",
                           "--steps", "6", "--min-time", "0", "--out", str(out), "train.py", "--steps", "30"],
                          cwd=src, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "run.json").read_text())
    patch = doc["patch"]
    assert patch["file"] is None and not (out / "fixes.patch").exists(), patch
    assert patch["command"] == ["python", "train.py", "--steps", "30", "--amp", "--channels-last"], patch["command"]
    notes = {n["intervention"]: n for n in patch["notes"]}
    assert notes["amp"]["switch"]["test"] == "args.amp" and notes["channels-last"]["switch"]["test"] == "args.channels_last"
    checks = {c["fix"]: c for c in patch["verification"]["checks"]}
    assert checks["amp"]["took_effect"] and checks["amp"]["observed"] == "autocast bfloat16", checks
    assert checks["channels-last"]["took_effect"], checks


def test_training_arguments_from_the_command_line(tmp_path):
    """HfArgumentParser fills TrainingArguments from the command line: the fields a fix sets
    (bf16, dataloader_num_workers) are passed on the recommended command, not written into the
    code, where the run's parser read them; the command line's own word is changed."""
    import pytest

    pytest.importorskip("transformers")
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(textwrap.dedent("""
        from transformers import HfArgumentParser, TrainingArguments

        parser = HfArgumentParser(TrainingArguments)
        (training_args,) = parser.parse_args_into_dataclasses()
        print(training_args.bf16, training_args.dataloader_num_workers)
        """).lstrip())
    argv = ["--output_dir", "out", "--dataloader_num_workers", "1", "--report_to", "none"]
    child = _baseline(root, "train.py", argv)
    opts = {o["dest"]: o for o in child["config"]["cli_options"]["value"]}
    assert opts["bf16"]["parser"] == "HfArgumentParser" and not opts["bf16"]["given"]
    assert opts["dataloader_num_workers"]["given"] and opts["dataloader_num_workers"]["value"] == "1"
    fixes = [{"intervention": "amp", "params": {}}, {"intervention": "dataloader-workers", "params": {"num_workers": 8}}]
    diff, notes = make_patch(str(root / "train.py"), fixes, child["config"], cwd=str(root),
                             executed=child["executed_lines"], argv=argv)
    assert all(n["applied"] for n in notes) and "set_defaults" not in diff, (notes, diff)
    command = verify.recommended_command("train.py", argv, notes)
    assert command[command.index("--dataloader_num_workers") + 1] == "8", command
    assert command[command.index("--bf16") + 1] == "True", command


def test_autocast_enabled_by_an_option(tmp_path):
    """``autocast(..., enabled=args.amp)`` entered disabled: the chain of ``enabled`` the run read
    up the stack ends at the option, and the amp fix is ``--amp`` on the command line."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(textwrap.dedent("""
        import argparse
        import torch
        import torch.nn.functional as F

        p = argparse.ArgumentParser()
        p.add_argument("--amp", action="store_true")
        args = p.parse_args()
        model = torch.nn.Linear(8, 2)


        def forward(x, y, use_amp):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=use_amp):
                return F.cross_entropy(model(x), y)


        for _ in range(2):
            forward(torch.randn(4, 8), torch.randint(0, 2, (4,)), args.amp).backward()
        """).lstrip())
    child = _baseline(root, "train.py", [])
    chain = child["config"]["autocast"]["provenance"]["enabled"]
    assert [link["kind"] for link in chain] == ["arg", "param", "arg", "option"], chain
    diff, notes = make_patch(str(root / "train.py"), [{"intervention": "amp", "params": {"dtype": "bfloat16"}}],
                             child["config"], cwd=str(root), executed=child["executed_lines"], argv=[])
    assert notes[0]["applied"] and not diff, (notes, diff)
    assert notes[0]["switch"]["how"] == "argument"
    assert verify.recommended_command("train.py", [], notes) == ["python", "train.py", "--amp"]
