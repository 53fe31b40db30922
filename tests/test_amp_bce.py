"""AMP on a script whose loss is binary cross-entropy (a GAN's BCELoss on its discriminator's
sigmoid): torch refuses it under CUDA autocast, so the trial and fixes.patch both compute it in
float32 outside autocast, with the same code."""

from __future__ import annotations

import ast

import torch
from test_patch import FIXTURE, _repo, apply, config_for, fixes, run

from advisor.fixes import make_patch

BCE_LOSS = "loss = nn.BCELoss()(out.sigmoid()[:, 0], (y % 2).float())"


def test_the_trial_computes_bce_in_float32_outside_autocast(monkeypatch):
    """The function amp.apply installs (its source, bound to a spy in place of torch's BCE):
    under autocast it calls BCE with autocast off and float32 inputs; outside it, as it was."""
    from advisor.runtime.amp_source import BCE_FLOAT32
    from advisor.runtime.patching import source_functions

    seen = []

    def spy(input, target, *args, **kwargs):
        seen.append((torch.is_autocast_enabled("cpu"), input.dtype, target.dtype))
        return torch.zeros((), dtype=input.dtype)

    monkeypatch.setattr(torch.nn.functional, "binary_cross_entropy", spy)
    bce = source_functions.__wrapped__("import torch\n\n\n" + BCE_FLOAT32, "test")["_bce_float32"]
    monkeypatch.setattr(torch.nn.functional, "binary_cross_entropy", bce)   # as amp.apply installs it
    x = torch.rand(4, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.nn.BCELoss()(x.bfloat16(), torch.ones(4, 1))
    torch.nn.BCELoss()(x.double(), torch.ones(4, 1).double())
    assert seen == [(False, torch.float32, torch.float32), (False, torch.float64, torch.float64)]


def test_the_patch_writes_the_same_float32_bce_where_the_script_uses_bceloss(tmp_path):
    text = FIXTURE.read_text().replace("loss = F.cross_entropy(out, y)", BCE_LOSS)
    script = _repo(tmp_path, FIXTURE, text=text)
    diff, notes = make_patch(str(script), fixes("amp"), config_for(script, "net", "x"))
    assert notes[0]["applied"] and notes[0].get("bce_float32"), notes
    apply(script, diff)
    tree = ast.parse(script.read_text())
    names = [ast.unparse(s).splitlines()[0] for s in tree.body]
    define = next(i for i, s in enumerate(tree.body) if isinstance(s, ast.FunctionDef) and s.name == "_bce_float32")
    assert names[define + 1] == "torch.nn.functional.binary_cross_entropy = _bce_float32"
    assert define < next(i for i, n in enumerate(names) if n.startswith("class Net"))   # before any use
    run(script, "--steps", "3")


def test_a_script_without_bce_gets_no_float32_bce(tmp_path):
    script = _repo(tmp_path, FIXTURE)
    diff, notes = make_patch(str(script), fixes("amp"), config_for(script, "net", "x"))
    assert notes[0]["applied"] and not notes[0].get("bce_float32") and "_bce_float32" not in diff
