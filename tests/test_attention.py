"""The sdpa-attention fix on a real (tiny) Hugging Face causal LM built from its config: the
runner reads the attention the model ran, the trial switches it at run time, and the patch
asks for it where the model is made, following the value to where the user sets it."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from advisor import fixes

pytest.importorskip("transformers")
SCRIPT = Path(__file__).parent / "fixtures" / "scripts" / "tiny_causal_lm.py"
QUICK = ["--warmup", "3", "--steps", "10", "--min-time", "0", "--profile-steps", "1"]


def _analyze(tmp_path, *args) -> dict:
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", *QUICK, "--out", str(out), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "run.json").read_text())


def test_the_trial_runs_the_model_with_sdpa_and_the_rule_names_the_eager_model(tmp_path):
    doc = _analyze(tmp_path, "--fix", "sdpa-attention", str(SCRIPT), "--steps", "60")
    attention = doc["config"]["attention"]["value"]
    assert attention == {"implementation": "eager", "class": "GPT2LMHeadModel", "sdpa": True, "flash": False}
    finding = next(f for f in doc["findings"] if f["code"] == "ADV121")
    assert finding["fix"]["intervention"] == "sdpa-attention" and "GPT2LMHeadModel" in finding["message"]
    trial = next(t for t in doc["trials"] if t["fix"] == "sdpa-attention")
    assert trial["status"] in ("accepted", "rejected") and trial["changes_numerics"], trial
    child = json.loads((Path(doc["run_dir"]) / "trials" / trial["name"] / "child.json").read_text())
    assert child["config"]["attention"]["value"]["implementation"] == "sdpa"   # as the steps ran it
    assert child["config"]["fix.sdpa-attention"]["value"] == {"class": "GPT2LMHeadModel", "implementation": "sdpa"}


def test_a_model_on_sdpa_already_gets_no_finding_and_no_trial(tmp_path):
    doc = _analyze(tmp_path, "--fix", "sdpa-attention", str(SCRIPT), "--steps", "60", "--attn", "sdpa")
    assert doc["config"]["attention"]["value"]["implementation"] == "sdpa"
    assert not any(f["code"] == "ADV121" for f in doc["findings"])
    trial = next(t for t in doc["trials"] if t["fix"] == "sdpa-attention")
    assert trial["status"] == "skipped" and "'sdpa' already" in trial["reason"]


def _patch(tmp_path, source: str, argv=()) -> tuple[str, dict, dict]:
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source))
    texts: dict = {}
    diff, notes = fixes.make_patch(str(script), [{"intervention": "sdpa-attention", "params": {}}], {},
                                   texts=texts, argv=list(argv), cwd=str(tmp_path))
    return diff, notes[0], texts


def test_the_patch_changes_the_flag_the_value_comes_from(tmp_path):
    src = SCRIPT.read_text()
    diff, note, texts = _patch(tmp_path, src)
    assert note["applied"], note
    assert '-p.add_argument("--attn", default="eager")' in diff and '+p.add_argument("--attn", default="sdpa")' in diff
    # the user passed the flag: the command changes, the code does not
    diff, note, _ = _patch(tmp_path, src, argv=["--attn", "eager"])
    assert not diff and note["argv_changes"], note


def test_the_patched_script_runs_sdpa_as_plain_python(tmp_path):
    _, note, texts = _patch(tmp_path, SCRIPT.read_text())
    (tmp_path / "train.py").write_text(texts["train.py"])
    proc = subprocess.run([sys.executable, "train.py", "--steps", "2"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().endswith("attention sdpa")


@pytest.mark.parametrize("source, line", [
    ('model = AutoModelForCausalLM.from_pretrained("gpt2")\n',
     '+model = AutoModelForCausalLM.from_pretrained("gpt2", attn_implementation="sdpa")'),
    ('tok = AutoTokenizer.from_pretrained("gpt2")\nconfig = LlamaConfig(hidden_size=64)\nmodel = LlamaForCausalLM(config)\n',
     '+config = LlamaConfig(hidden_size=64, attn_implementation="sdpa")'),
])
def test_the_patch_asks_for_sdpa_where_the_model_or_its_config_is_made(tmp_path, source, line):
    diff, note, _ = _patch(tmp_path, source)
    assert note["applied"] and line in diff, diff
    assert "AutoTokenizer.from_pretrained(\"gpt2\", attn" not in diff   # a tokenizer is no model


def test_several_model_calls_are_not_guessed_between(tmp_path):
    _, note, _ = _patch(tmp_path, 'a = AutoModel.from_pretrained("x")\nb = AutoModel.from_pretrained("y")\n')
    assert not note["applied"] and "several calls could make the model" in note["reason"], note


@pytest.mark.parametrize("run, manual, sdpa", [
    ("attention_eager_cpu", 2.0, 0.0),          # GPT-2's eager attention, 2 layers
    ("attention_manual_code_cpu", 2.0, 0.0),    # nanoGPT's hand-written path, 2 layers
    ("attention_sdpa_cpu", 0.0, 2.0),           # the softmax inside SDPA's math path is SDPA's own
    ("attention_sdpa_code_cpu", 0.0, 2.0),
    ("gc_light_cpu", 0.0, 0.0),
])
def test_the_trace_counts_hand_written_attention_and_sdpa_a_step(run, manual, sdpa):
    from advisor.metrics import analyze
    from advisor.trace import load_trace

    root = Path(__file__).parent / "fixtures" / "runs" / run
    doc = json.loads((root / "run.json").read_text())
    got = analyze(load_trace(root / doc["traces"]["baseline"][-1]))["attention"]
    assert got == {"manual_per_step": manual, "sdpa_per_step": sdpa}
