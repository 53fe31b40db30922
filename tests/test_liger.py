"""Logits over a large vocabulary (ADV125) and the liger-kernels fix: the runner records the
output layer's first training logits, the fix says why it cannot run here (a CPU, no
liger-kernel), and its patch is Liger's own instance patch, or the Trainer's use_liger_kernel."""

from __future__ import annotations

import textwrap
from pathlib import Path

from test_patch import _repo
from test_patch_frameworks import HF, _kwargs, _patch, _site, _write
from test_runner_support import STEP_GUARD, run_advised

from advisor import fixes
from advisor.fixes import make_patch

ROOT = Path(__file__).resolve().parents[1]
TINY_LM = ROOT / "tests" / "fixtures" / "scripts" / "tiny_causal_lm.py"


def test_the_runner_records_the_output_layers_training_logits(capfd, tmp_path):
    res, _out, err, _ = run_advised(capfd, TINY_LM, [str(TINY_LM), "--steps", "12", "--vocab", "40000", "--batch", "2"],
                                    str(tmp_path), str(tmp_path / "run"), timeout=300, step_timeout=STEP_GUARD,
                                    warmup_steps=2, profile_steps=0, measure_steps=3, measure_min_s=0)
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    logits = res["config"]["logits"]["value"]
    assert logits == {"shape": [2, 64, 40000], "dtype": "float32", "vocab": 40000, "tokens": 128, "model_type": "gpt2"}
    small, _out, err, _ = run_advised(capfd, TINY_LM, [str(TINY_LM), "--steps", "12"], str(tmp_path), str(tmp_path / "run2"),
                                      timeout=300, step_timeout=STEP_GUARD, warmup_steps=2, profile_steps=0,
                                      measure_steps=3, measure_min_s=0)
    assert "logits" not in small["config"]   # a 256-token vocabulary: no output layer of 32k


def test_the_fix_says_why_it_cannot_run_and_checks_that_no_logits_are_held():
    fix, mod = fixes.get("liger-kernels"), fixes.get("liger-kernels").module()
    config = {"logits": {"value": {"shape": [32, 64, 50257], "model_type": "gpt2"}}}
    assert "CUDA GPU" in mod.not_applicable(config, {"gpu_count": 0}, {})
    base = {"config": config}
    assert fix.check({}, {}, base)[0] is True                  # the fused loss held no logits
    assert fix.check(config, {}, base)[0] is False
    assert fix.check({}, {}, {"config": {}})[0] is None        # nothing to compare with


def test_the_patch_applies_ligers_instance_patch_after_the_model_is_placed(tmp_path):
    script = _repo(tmp_path, Path("train.py"), text=textwrap.dedent("""
        import torch
        from transformers import AutoModelForCausalLM, GPT2Config

        model = AutoModelForCausalLM.from_config(GPT2Config(vocab_size=50257, n_layer=2))
        model = model.to("cuda")
        opt = torch.optim.AdamW(model.parameters())
    """).lstrip())
    line = next(i for i, t in enumerate(script.read_text().splitlines(), 1) if t.startswith("model = model.to"))
    config = {"model": {"value": {}, "where": f"train.py:{line}"}, "parameters": {"value": {}, "where": f"train.py:{line}"},
              "logits": {"value": {"model_type": "gpt2"}, "where": f"train.py:{line}"}}
    diff, notes = make_patch(str(script), [{"intervention": "liger-kernels", "params": {}}], config)
    assert [n["applied"] for n in notes] == [True], notes
    added = [ln[1:] for ln in diff.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    assert "from liger_kernel.transformers import _apply_liger_kernel_to_instance" in added
    assert added[-1] == "_apply_liger_kernel_to_instance(model=model)"
    assert notes[0]["changes_numerics"] and "CUDA GPU" in notes[0]["warning"]


def test_a_trainer_script_gets_use_liger_kernel(tmp_path):
    script = _write(tmp_path, HF)
    config = {"input": {"value": {}, "where": _site(tmp_path, "transformers", "trainer.py", 3900)}}
    _diff, notes, _new, tree = _patch(script, [{"intervention": "liger-kernels", "params": {}}], config)
    assert _kwargs(tree, "TrainingArguments")["use_liger_kernel"] == "True" and notes["liger-kernels"]["applied"]
