"""float8-training: torchao's float8 training on the model's large linear layers, measured apart
as a numerics change. The runner records the model's linear layers and their GEMMs (M x K x N);
the fix says why it cannot run (no FP8 tensor cores, no torchao, no large layer); the trial's
run-time swap and the patch's edit (one source text) run on the CPU, where torchao's float8
matmul runs too, slowly: what is checked is which layers are swapped, not their speed."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from test_patch import _repo, apply
from test_runner_support import STEP_GUARD, run_advised, write

from advisor import fixes
from advisor.fixes import make_patch
from advisor.fixes.float8_training import fp8_tensor_cores, large_for_fp8

pytest.importorskip("torchao")

# a feed-forward block large enough for FP8 (256 -> 2048: N > 1024), its way back too small
# (2048 -> 256: K <= 4096 and N <= 1024, torchao's filter leaves it), and an output layer over a
# 32768-word vocabulary, which stays in high precision
NET = """
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 256),
                                torch.nn.Linear(256, 32768))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    data = torch.utils.data.TensorDataset(torch.randn(64, 256), torch.randint(0, 32768, (64,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
    for epoch in range(1000):
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if epoch == 2:
            break
    print("done", flush=True)
"""


def _advised(capfd, tmp_path, script, fix_specs):
    res, _out, err, _ = run_advised(capfd, script, [str(script)], str(tmp_path), str(tmp_path / "run"), timeout=300,
                                    step_timeout=STEP_GUARD, warmup_steps=2, profile_steps=0, measure_steps=3,
                                    measure_min_s=0, interventions=fix_specs)
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    return res


def test_the_runner_records_the_linear_layers_and_their_gemms(capfd, tmp_path):
    res = _advised(capfd, tmp_path, write(tmp_path / "train.py", NET), [])
    linears = res["config"]["linears"]["value"]
    assert (linears["count"], linears["float8"]) == (3, 0)
    # M is the rows each layer was fed (the batch of 8), the largest GEMM first
    assert linears["gemms"] == [{"m": 8, "k": 256, "n": 32768, "layers": 1}, {"m": 8, "k": 256, "n": 2048, "layers": 1},
                                {"m": 8, "k": 2048, "n": 256, "layers": 1}]
    assert linears["flops_per_forward"] == 2 * 8 * (256 * 32768 + 256 * 2048 + 2048 * 256)


def test_the_trial_swaps_the_large_layers_and_keeps_the_output_layer(capfd, tmp_path):
    res = _advised(capfd, tmp_path, write(tmp_path / "train.py", NET), [{"name": "float8-training", "params": {}}])
    linears = res["config"]["linears"]["value"]
    assert (linears["count"], linears["float8"]) == (3, 1), linears   # 256 -> 2048 only
    fix = fixes.get("float8-training")
    ok, expected, observed = fix.check(res["config"], {}, {"config": {}})
    assert ok is True and observed == "1 of 3 linear layers in float8"
    assert fix.check({"linears": {"value": {"count": 3, "float8": 0}}}, {}, {})[0] is False
    assert fix.check({}, {}, {})[0] is None   # not observed: not checked


def test_the_fix_says_why_it_cannot_run():
    fix = fixes.get("float8-training")
    large = {"linears": {"value": {"count": 2, "gemms": [{"m": 4096, "k": 4096, "n": 11008, "layers": 32}]}}}
    small = {"linears": {"value": {"count": 2, "gemms": [{"m": 4096, "k": 768, "n": 768, "layers": 48}]}}}
    h100 = {"gpu_count": 1, "gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0"}
    assert "CUDA GPU" in fix.not_applicable(large, {"gpu_count": 0}, {})
    assert "no FP8 tensor cores" in fix.not_applicable(large, {"gpu_count": 1, "gpu_name": "NVIDIA A100-SXM4-80GB",
                                                               "compute_capability": "8.0"}, {})
    assert fix.not_applicable(large, h100, {}) is None
    assert "large enough" in fix.not_applicable(small, h100, {})
    assert "no nn.Linear" in fix.not_applicable({}, h100, {})
    # the GPU's capability first, its datasheet name where no capability was recorded
    assert fp8_tensor_cores({"compute_capability": "8.9"}) and not fp8_tensor_cores({"compute_capability": "8.6"})
    assert fp8_tensor_cores({"gpu_name": "NVIDIA H200"}) is True
    assert fp8_tensor_cores({"gpu_name": "Tesla V100-SXM2-16GB"}) is False
    assert fp8_tensor_cores({"gpu_name": "Some New GPU"}) is None
    assert large_for_fp8(4096, 11008) and large_for_fp8(768, 3072) and not large_for_fp8(768, 768)
    assert not large_for_fp8(4096, 50257)   # not a multiple of 16


def test_the_patch_swaps_the_same_layers_as_plain_python(tmp_path):
    script = _repo(tmp_path, Path("train.py"), text=textwrap.dedent(NET))
    text = script.read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if t.startswith("model = "))
    config = {"model": {"value": {}, "where": f"train.py:{line}"}, "parameters": {"value": {}, "where": f"train.py:{line}"}}
    diff, notes = make_patch(str(script), [{"intervention": "float8-training", "params": {}}], config)
    assert [n["applied"] for n in notes] == [True], notes
    assert "+model = _float8_training(model)" in diff and "+def _float8_training(model):" in diff
    assert notes[0]["changes_numerics"] and "FP8 tensor cores" in notes[0]["warning"]
    apply(script, diff)
    # the swap comes before the optimizer is made, and keeps the Parameters it is made from
    lines = script.read_text().splitlines()
    assert lines.index("model = _float8_training(model)") < next(i for i, t in enumerate(lines) if t.startswith("opt = "))
    script.write_text(script.read_text() + "\nprint('float8', [type(m).__name__ for m in model])\n")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=script.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "done" in out.stdout and "float8 ['Float8Linear', 'GELU', 'Linear', 'Linear']" in out.stdout


def test_under_a_framework_the_model_handed_to_it_is_converted(tmp_path):
    """Lightning's loop calls ``self(x)`` in training_step, where the name bound is the output:
    the conversion goes before ``trainer.fit(model)``, ahead of channels-last's and compile's
    own edits there. A Hugging Face Trainer script gets it before ``Trainer(model=model)``."""
    from test_patch_frameworks import HF, LIGHTNING, _line, _patch, _site, _write

    script = _write(tmp_path, LIGHTNING.replace("return self.net(x).mean()", "out = self(x)\n        return out.mean()"))
    config = {"zero_grad": {"value": {"set_to_none": True}, "where": _site(tmp_path, "lightning", "pytorch/core/module.py", 1400)},
              "input": {"value": {}, "where": f"train.py:{_line(script, 'out = self(x)')}"},
              "parameters": {"value": {}, "where": f"train.py:{_line(script, 'out = self(x)')}"}}
    specs = [{"intervention": n, "params": {}} for n in ("float8-training", "channels-last", "torch-compile")]
    _diff, notes, new, _tree = _patch(script, specs, config)
    assert all(n["applied"] for n in notes.values()), notes
    lines = new.splitlines()
    fit = next(i for i, t in enumerate(lines) if t.startswith("trainer.fit("))
    # both conversions of the model handed to fit (they touch different layers: any order)
    assert set(lines[fit - 2:fit]) == {"model = _float8_training(model)", "model = model.to(memory_format=torch.channels_last)"}
    assert lines[fit] == "trainer.fit(torch.compile(model), datamodule=dm)"   # compiled after both
    assert "out = _float8_training(out)" not in new and "def _float8_training(model):" in new
    # a fix with no Lightning way of its own is not written on the output either
    _diff, notes, new, _tree = _patch(script, [{"intervention": "liger-kernels", "params": {}}], config)
    assert not notes["liger-kernels"]["applied"] and "calls itself" in notes["liger-kernels"]["reason"]

    hf = _write(tmp_path, HF, name="hf.py")
    config = {"input": {"value": {}, "where": _site(tmp_path, "transformers", "trainer.py", 3900)},
              "parameters": {"value": {}, "where": _site(tmp_path, "transformers", "trainer.py", 3900)}}
    _diff, notes, new, _tree = _patch(hf, [{"intervention": "float8-training", "params": {}}], config)
    assert notes["float8-training"]["applied"], notes
    lines = [t.strip() for t in new.splitlines()]
    at = lines.index("model = _float8_training(model)")
    assert lines[at + 1] == "trainer = Trainer(model=model, args=training_args, train_dataset=None)"
    assert lines.index('model = AutoModelForSequenceClassification.from_pretrained("tiny")') < at


def test_measured_apart_its_reason_speaks_of_numerics_and_of_compile():
    """Not the batch's words (scale the learning rate): FP8 changes numerics; on kept fixes that
    do not compile the model, torchao's casts ran unfused, and the reason says so."""
    fix = fixes.get("float8-training")
    eager = fix.apart_note(["amp", "fused-optimizer"])
    assert "changes numerics" in eager and "do not compile the model" in eager and "learning rate" not in eager
    assert fix.apart_note(["amp", "torch-compile"]) == \
        "changes numerics: compare its loss curve with the kept fixes' before you keep it"
    assert "scale the learning rate" in fixes.get("batch-size").apart_note([])
