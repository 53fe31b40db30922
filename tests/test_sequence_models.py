"""What a sequence model's run shows beyond samples/s: the tokens the runner counts (a mapping
batch's CPU attention mask), the real tokens a second and the padding share (ADV122, and the
dynamic-padding trial and patch on a small causal LM fed texts padded to its length), the
6 x parameters x tokens cross-check, and torch.compile's recompiles inside the window (ADV123)."""

from __future__ import annotations

import collections
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from advisor import measure
from advisor.runner.tokens import tokens_of

SCRIPT = Path(__file__).parent / "fixtures" / "scripts" / "padded_lm.py"


def test_the_runner_counts_a_mapping_batchs_attention_mask():
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    assert tokens_of({"input_ids": torch.zeros(2, 4), "attention_mask": mask}) == (4, 8, 4)

    class Encoding(collections.UserDict):   # what transformers' BatchEncoding is
        pass

    assert tokens_of(Encoding(attention_mask=mask)) == (4, 8, 4)
    # no mask, a tuple batch, a 1-D mask: nothing said
    assert tokens_of({"input_ids": torch.zeros(2, 4)}) is None
    assert tokens_of((torch.zeros(2, 4), mask)) is None
    assert tokens_of({"attention_mask": torch.ones(4)}) is None


def test_real_tokens_a_second_and_the_padding_share_of_the_timed_steps():
    child = {"tokens": [[30, 100], [50, 100]], "measure_window_ms": 20.0, "world_size": 1}
    assert measure.tokens_per_s(child) == pytest.approx(80 * 1000 / 20.0)
    assert measure.padding_frac(child) == pytest.approx(0.6)
    assert measure.tokens_per_s({**child, "world_size": 2}) == pytest.approx(2 * 80 * 1000 / 20.0)
    # a step whose batches said nothing: no figure, rather than a wrong one
    assert measure.tokens_per_s({**child, "tokens": [[30, 100], None]}) is None
    assert measure.padding_frac({"tokens": None}) is None


def test_a_language_model_fed_no_mask_counts_every_position_of_its_logits():
    """Token windows with no attention mask (nanoGPT's get_batch, a Llama pre-train loop): the
    output layer's logits [batch, positions, vocab] say how many tokens a sample is."""
    child = {"batch_size": 8, "step_times_ms": [100.0, 100.0], "measure_window_ms": 200.0,
             "config": {"logits": {"value": {"shape": [8, 1024, 32000], "vocab": 32000}}}}
    assert measure.samples_per_s(child) == pytest.approx(80.0)
    assert measure.tokens_per_s(child) == pytest.approx(80.0 * 1024)
    assert measure.padding_frac(child) is None                     # nothing said of padding
    flat = {**child, "config": {"logits": {"value": {"shape": [8192, 32000]}}}}
    assert measure.tokens_per_s(flat) is None                       # positions not told apart
    assert measure.tokens_per_s({**child, "config": {}}) is None    # no logits observed


def test_a_model_called_with_keywords_alone_shows_its_batch_and_tokens_by_its_logits(tmp_path):
    """model(input_ids=x, labels=x) in a loop of its own (no DataLoader, no positional input):
    the batch is read from the output layer's logits, and every position is a token."""
    pytest.importorskip("transformers")
    llama = Path(__file__).resolve().parents[1] / "examples" / "llama_from_config.py"
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--no-trials", "--warmup", "2", "--steps", "4",
                           "--min-time", "0", "--profile-steps", "1", "--out", str(out), str(llama), "--device", "cpu",
                           "--hidden", "64", "--layers", "2", "--heads", "4", "--seq", "64", "--batch-size", "4",
                           "--steps", "30"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    meas = json.loads((out / "run.json").read_text())["measurement"]
    assert (meas["batch_size"], meas["batch_size_source"]) == (4, "logits")
    assert meas["tokens_per_s"] == pytest.approx(meas["samples_per_s"] * 64, rel=1e-6)
    assert "every position a token" in proc.stdout + proc.stderr


@pytest.mark.parametrize("lengths, padded", [("mixed", True), ("full", False)])
def test_a_run_reports_real_tokens_and_adv122_fires_on_mostly_padding(tmp_path, lengths, padded):
    pytest.importorskip("transformers")
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--no-trials", "--warmup", "3", "--steps", "10",
                           "--min-time", "0", "--profile-steps", "1", "--out", str(out), str(SCRIPT), "--steps", "40",
                           "--lengths", lengths], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "run.json").read_text())
    meas = doc["measurement"]
    assert meas["tokens_per_s"] > 0
    assert (0.5 < meas["padding_frac"] < 0.85) if padded else meas["padding_frac"] == 0.0
    # real tokens, not padded ones: samples/s times the real tokens of a sample
    real_per_sample = (1 - meas["padding_frac"]) * 64
    assert meas["tokens_per_s"] == pytest.approx(meas["samples_per_s"] * real_per_sample, rel=1e-6)
    assert any(f["code"] == "ADV122" for f in doc["findings"]) is padded
    assert "real tokens/s" in proc.stdout + proc.stderr and 'id="tokens-per-s"' in (out / "index.html").read_text()


def test_the_data_free_ceiling_does_not_claim_to_bound_a_padding_fix():
    """A cached batch that is mostly padding bounds a faster loader, not batches with less
    padding: the ceiling's reason says so."""
    from advisor.trials.ceiling import _bound_words

    assert _bound_words(None) == "no data fix can make the step faster than this"
    assert _bound_words(0.01) == "no data fix can make the step faster than this"
    words = _bound_words(0.67)
    assert "no data fix" not in words and "67% of the batches' tokens are padding" in words


def test_the_dynamic_padding_trial_cuts_the_batches_and_its_patch_does_so_as_plain_python(tmp_path):
    """The trial wraps the loader's collate function; the patch writes the same function into the
    script, and its run as plain python has batches of varied width with less padding."""
    pytest.importorskip("transformers")
    quick = ["--warmup", "3", "--steps", "10", "--min-time", "0", "--profile-steps", "1"]
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", *quick, "--fix", "dynamic-padding", "--out",
                           str(out), str(SCRIPT), "--steps", "60"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "run.json").read_text())
    trial = next(t for t in doc["trials"] if t["fix"] == "dynamic-padding")
    assert trial["status"] in ("accepted", "rejected"), trial
    child = json.loads((out / "trials" / trial["name"] / "child.json").read_text())
    before, after = doc["config"]["tokens"]["value"], child["config"]["tokens"]["value"]
    assert before["widths"] == [64] and len(after["widths"]) > 1
    assert after["real"] / after["all"] > before["real"] / before["all"]   # the same texts, less padding
    # the patch for exactly this fix, verified as plain python
    out2 = tmp_path / "apply"
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", *quick, "--no-trials", "--apply", "dynamic-padding",
                           "--out", str(out2), str(SCRIPT), "--steps", "60"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out2 / "run.json").read_text())
    assert "+def _trim_padding(collate):" in (out2 / "fixes.patch").read_text()
    assert "collate_fn=_trim_padding(torch.utils.data.default_collate)" in (out2 / "fixes.patch").read_text()
    check = doc["patch"]["verification"]["checks"][0]
    assert check["fix"] == "dynamic-padding" and check["took_effect"] is True, check
    # the plain-python run's real tokens a second, as the baseline's are read
    verified = doc["patch"]["verification"]
    runs = [json.loads(p.read_text()) for p in sorted((out2 / "verify").glob("run-*/child.json"))]
    assert len(runs) == verified["runs"] and verified["tokens_per_s"] > 0
    assert verified["tokens_per_s"] == pytest.approx(sum(map(measure.tokens_per_s, runs)) / len(runs), rel=1e-6)


def test_a_transformers_flops_are_cross_checked_with_six_n_tokens():
    """6 x parameters x tokens a step (padding included: the step computes it) beside the
    counted operators' FLOPs, and the MFU of the real tokens alone on a GPU's bf16 peak."""
    from advisor import headroom

    root = Path(__file__).parent / "fixtures" / "runs" / "padding_mixed_cpu"
    doc, child = (json.loads((root / n).read_text()) for n in ("run.json", "child.json"))
    params = doc["config"]["parameters"]["value"]["count"]
    six = headroom.six_n_tokens(doc, child)
    assert six["tokens_per_step"] == 8 * 64 and six["flops_per_step"] == 6 * params * 8 * 64
    assert six["counted_ratio"] is None   # the run counted no FLOPs: said so, and the cross-check stands alone
    lines = headroom.lines(headroom.summary(doc, child))
    assert lines[0].startswith("FLOPs not counted") and lines[1].startswith("6 x parameters x tokens: ")
    gpu = {**doc, "environment": {"gpu_name": "NVIDIA H100 80GB HBM3"}}
    r = headroom.summary(gpu, {**child, "flops": {"per_step": 2 * six["flops_per_step"]}})
    assert r["transformer"]["counted_ratio"] == pytest.approx(2.0)
    real = doc["measurement"]["tokens_per_s"]
    assert r["transformer"]["real_token_mfu"] == pytest.approx(6 * params * real / (r["bf16_peak_tflops"] * 1e12))
    assert "the counted operators are 2.00x that" in headroom.lines(r)[-1]


def test_the_window_counts_graphs_compiled_inside_it():
    """A model compiled for static shapes fed 16 lengths recompiles inside the timed window;
    compiled dynamic, it does not (the recorded runs ADV123 reads)."""
    from advisor.results import merge_child_results

    runs = Path(__file__).parent / "fixtures" / "runs"
    got = {}
    for v in ("static", "dynamic"):
        child = json.loads((runs / f"recompiles_{v}_cpu" / "child.json").read_text())
        analysis: dict = {}
        merge_child_results(analysis, child)
        got[v] = (child["window_compiles"], analysis["measured"].get("window_compiles", 0))
    assert got["static"][0] >= 2 and got["static"][1] == got["static"][0]
    assert got["dynamic"] == (0, 0)
