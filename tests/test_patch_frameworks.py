"""advisor.patch.frameworks: a loop inside transformers' or Lightning's Trainer is fixed by the
arguments of the call that configures it, not by edits of the (installed) loop.

Small scripts in a tmp dir, sites pointing into a fake site-packages; nothing is imported from
transformers or Lightning (each takes many seconds to import): the keywords the editor writes
are checked against the installed packages' source with ast.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import textwrap

import pytest

from advisor.fixes import make_patch
from advisor.patch import frameworks
from advisor.patch.core import PatchContext

HF = '''\
"""Fine-tune with the HF Trainer."""
import argparse

from transformers import AutoModelForSequenceClassification, Trainer, TrainingArguments


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out")
    parser.add_argument("--bf16", action="store_true", default=False)
    args = parser.parse_args()
    model = AutoModelForSequenceClassification.from_pretrained("tiny")
    training_args = TrainingArguments(
        output_dir=args.out,
        per_device_train_batch_size=8,
        report_to="none",
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=None)
    trainer.train()


if __name__ == "__main__":
    main()
'''

LIGHTNING = '''\
import argparse

import lightning as L
import torch
from torch import nn


class Lit(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Conv2d(3, 8, 3)

    def training_step(self, batch, i):
        x, y = batch
        return self.net(x).mean()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


parser = argparse.ArgumentParser()
parser.add_argument("--precision", default="32-true")
args = parser.parse_args()
model = Lit()
dm = None
trainer = L.Trainer(max_epochs=1, precision=args.precision)
trainer.fit(model, datamodule=dm)
'''

PLAIN = '''\
import torch
from transformers import AutoModel

model = AutoModel.from_pretrained("tiny")
opt = torch.optim.AdamW(model.parameters())
for x in range(3):
    out = model(x)
    loss = out.sum()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=False)
'''

FIXES = [{"intervention": "amp", "params": {}},
         {"intervention": "torch-compile", "params": {"mode": "reduce-overhead"}},
         {"intervention": "dataloader-workers", "params": {"num_workers": 8}},
         {"intervention": "tf32", "params": {}}]


def _write(tmp_path, text: str, name: str = "train.py"):
    proj = tmp_path / "proj"
    proj.mkdir(exist_ok=True)
    script = proj / name
    script.write_text(textwrap.dedent(text))
    return script


def _site(tmp_path, package: str, rel: str, line: int) -> str:
    return f"{tmp_path}/venv/lib/python3.11/site-packages/{package}/{rel}:{line}"


def _line(script, text: str) -> int:
    return next(i for i, ln in enumerate(script.read_text().splitlines(), 1) if text in ln)


def _patch(script, fixes, config, **kw):
    texts: dict = {}
    diff, notes = make_patch(str(script), fixes, config, cwd=str(script.parent), texts=texts, **kw)
    new = texts.get(script.name, script.read_text())
    tree = ast.parse(new)        # the patched file parses
    return diff, {n["intervention"]: n for n in notes}, new, tree


def _kwargs(tree, name: str) -> dict:
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and
                (getattr(n.func, "id", None) == name or getattr(n.func, "attr", None) == name))
    return {k.arg: ast.unparse(k.value) for k in call.keywords}


def _ctx(script, config=None, executed=None) -> PatchContext:
    from advisor import fixes

    return PatchContext(script=str(script), root=str(script.parent), cwd=str(script.parent),
                        config=config or {}, executed=executed or {}, registry=fixes)


# ----------------------------------------------------------------------------- transformers

def test_hf_trainer_sites_become_training_arguments(tmp_path):
    script = _write(tmp_path, HF)
    config = {"input": {"value": {}, "where": _site(tmp_path, "transformers", "trainer.py", 3900)},
              "optimizer": {"value": {"class": "AdamW"}, "where": _site(tmp_path, "transformers", "trainer.py", 1200)},
              "zero_grad": {"value": {"set_to_none": True}, "where": _site(tmp_path, "accelerate", "optimizer.py", 115)}}
    assert frameworks.framework_of(_ctx(script, config)) == "transformers"
    fixes = FIXES + [{"intervention": n, "params": {}} for n in ("fused-optimizer", "pin-memory", "set-to-none",
                                                                  "cudnn-benchmark")]
    diff, notes, new, tree = _patch(script, fixes, config)
    args = _kwargs(tree, "TrainingArguments")
    assert args == {"output_dir": "args.out", "per_device_train_batch_size": "8", "report_to": "'none'",
                    "bf16": "True", "torch_compile": "True", "torch_compile_mode": "'reduce-overhead'",
                    "dataloader_num_workers": "8", "dataloader_persistent_workers": "True", "tf32": "True",
                    "optim": "'adamw_torch_fused'", "dataloader_pin_memory": "True"}
    assert "+        bf16=True,\n" in diff and "+        torch_compile=True,\n" in diff
    assert "autocast" not in diff and "outside" not in str(notes)
    assert notes["amp"]["where"] == f"train.py:{_line(script, 'TrainingArguments(')}"
    assert notes["amp"]["changes_numerics"] is True
    assert notes["set-to-none"] == {"intervention": "set-to-none", "applied": False,
                                    "reason": "the Trainer already zeroes gradients with set_to_none"}
    # cudnn.benchmark has no TrainingArguments field: the generic module-level setting
    assert "torch.backends.cudnn.benchmark = True" in new and notes["cudnn-benchmark"]["applied"]


def test_hf_static_call_fp16_swap_and_flag_default(tmp_path):
    """No framework site observed: the TrainingArguments call the script makes decides. fp16
    and bf16 both True is refused by TrainingArguments; a flag's value changes at its default."""
    script = _write(tmp_path, HF.replace('report_to="none",', 'report_to="none", fp16=True, tf32=args.bf16,'))
    assert frameworks.framework_of(_ctx(script)) == "transformers"
    diff, notes, new, tree = _patch(script, [{"intervention": "amp", "params": {}},
                                             {"intervention": "tf32", "params": {}}], {})
    args = _kwargs(tree, "TrainingArguments")
    assert args["bf16"] == "True" and args["fp16"] == "False" and args["tf32"] == "args.bf16"
    assert 'add_argument("--bf16", action="store_true", default=True)' in new
    assert all(n["applied"] for n in notes.values()), notes


def test_hf_unpacked_arguments_get_the_keyword_and_a_warning(tmp_path):
    script = _write(tmp_path, '''\
        import transformers

        cfg = {"output_dir": "out"}
        args = transformers.TrainingArguments(**cfg)
        ''')
    _, notes, new, _ = _patch(script, [{"intervention": "amp", "params": {"dtype": "float16"}}], {})
    assert "transformers.TrainingArguments(**cfg, fp16=True)" in new
    assert "if the unpacked mapping sets fp16 too" in notes["amp"]["warning"]


def test_hf_user_dataloader_and_sgd_fall_back_or_skip(tmp_path):
    script = _write(tmp_path, HF)
    config = {"input": {"value": {}, "where": _site(tmp_path, "transformers", "trainer.py", 3900)},
              "optimizer": {"value": {"class": "SGD"}, "where": _site(tmp_path, "transformers", "trainer.py", 1200)},
              "dataloader": {"value": {}, "where": f"train.py:{_line(script, 'Trainer(model')}"}}
    _, notes, _, tree = _patch(script, [{"intervention": "fused-optimizer", "params": {}},
                                        {"intervention": "dataloader-workers", "params": {"num_workers": 4}}], config)
    assert "fused choice for AdamW only" in notes["fused-optimizer"]["reason"]
    # the DataLoader site is the user's: the generic editor looked there (and found no DataLoader)
    assert "DataLoader" in notes["dataloader-workers"]["reason"]
    assert "dataloader_num_workers" not in _kwargs(tree, "TrainingArguments")


def test_hf_argument_parser_changes_the_command_line(tmp_path):
    script = _write(tmp_path, '''\
        from transformers import HfArgumentParser, Trainer, TrainingArguments

        (training_args,) = HfArgumentParser((TrainingArguments,)).parse_args_into_dataclasses()
        Trainer(model=None, args=training_args).train()
        ''')
    diff, notes, _, _ = _patch(script, [{"intervention": "dataloader-workers", "params": {"num_workers": 8}},
                                        {"intervention": "amp", "params": {}}], {},
                               argv=["--output_dir", "o", "--dataloader_num_workers", "2"])
    assert diff == ""
    dl = notes["dataloader-workers"]
    assert dl["applied"] and dl["argv_changes"] == [{"flag": "--dataloader_num_workers", "from": "2", "to": "8"}]
    assert "pass --dataloader_persistent_workers True" in dl["warning"]
    assert not notes["amp"]["applied"] and "pass --bf16 True" in notes["amp"]["reason"]


def test_hf_argument_parser_defaults_in_code(tmp_path):
    """A flag the command line does not pass: parser.set_defaults(...), an existing call edited."""
    src = '''\
        from transformers import HfArgumentParser, TrainingArguments

        parser = HfArgumentParser((TrainingArguments,))
        (training_args,) = parser.parse_args_into_dataclasses()
        '''
    script = _write(tmp_path, src)
    diff, notes, new, _ = _patch(script, [{"intervention": "amp", "params": {}}], {}, argv=["--output_dir", "o"])
    assert "+parser.set_defaults(bf16=True)\n" in diff and notes["amp"]["applied"]
    script.write_text(textwrap.dedent(src).replace("(training_args,) =", 'parser.set_defaults(report_to="none")\n(training_args,) ='))
    _, notes, new, _ = _patch(script, [{"intervention": "tf32", "params": {}}], {}, argv=["--bf16"])
    assert 'parser.set_defaults(report_to="none", tf32=True)' in new
    _, notes, _, _ = _patch(script, [{"intervention": "amp", "params": {}}], {}, argv=["--bf16"])
    assert "the command line already passes" in notes["amp"]["reason"]


def test_hf_trainer_gets_gradient_checkpointing_and_is_told_to_raise_its_batch(tmp_path):
    """activation-checkpointing on a Trainer script: TrainingArguments(gradient_checkpointing=True),
    the Trainer's own switch; the doubled batch the trial measured with it is the user's to set."""
    script = _write(tmp_path, HF)
    config = {"input": {"value": {}, "where": _site(tmp_path, "transformers", "trainer.py", 3900)}}
    diff, notes, new, tree = _patch(script, [{"intervention": "activation-checkpointing", "params": {"factor": 2}}], config)
    assert _kwargs(tree, "TrainingArguments")["gradient_checkpointing"] == "True"
    note = notes["activation-checkpointing"]
    assert note["applied"] and note["changes_numerics"] and "per_device_train_batch_size x2" in note["warning"]
    assert "_checkpoint_blocks" not in new


def test_training_arguments_have_every_keyword_written():
    spec = importlib.util.find_spec("transformers")
    if spec is None:
        pytest.skip("transformers is not installed")
    # the dataclass's fields from its source: importing transformers takes seconds
    src = open(os.path.join(os.path.dirname(spec.origin), "training_args.py"), encoding="utf-8").read()
    cls = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "TrainingArguments")
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    assert {"bf16", "fp16", "torch_compile", "torch_compile_mode", "tf32", "dataloader_num_workers",
            "dataloader_persistent_workers", "dataloader_pin_memory", "optim", "gradient_checkpointing",
            "use_liger_kernel"} <= fields
    assert '"adamw_torch_fused"' in src


# ----------------------------------------------------------------------------- Lightning

def test_lightning_trainer_arguments_and_model_before_fit(tmp_path):
    script = _write(tmp_path, LIGHTNING)
    config = {"zero_grad": {"value": {"set_to_none": True}, "where": _site(tmp_path, "lightning", "pytorch/core/module.py", 1400)},
              "optimizer": {"value": {"class": "AdamW"}, "where": f"train.py:{_line(script, 'AdamW(')}"},
              "input": {"value": {}, "where": f"train.py:{_line(script, 'self.net(x)')}"}}
    assert frameworks.framework_of(_ctx(script, config)) == "lightning"
    fixes = FIXES + [{"intervention": n, "params": {}} for n in ("cudnn-benchmark", "channels-last")]
    diff, notes, new, tree = _patch(script, fixes, config)
    assert _kwargs(tree, "Trainer") == {"max_epochs": "1", "precision": "args.precision", "benchmark": "True"}
    assert 'parser.add_argument("--precision", default="bf16-mixed")' in new   # the flag's default (knobs)
    lines = new.splitlines()
    fit = lines.index('trainer.fit(torch.compile(model, mode="reduce-overhead"), datamodule=dm)')
    assert lines[fit - 1] == "model = model.to(memory_format=torch.channels_last)"
    assert 'torch.set_float32_matmul_precision("high")' in new
    # the LightningModule's own optimizer and DataLoaders: the generic editors (fused=True on AdamW(...))
    ctx = _ctx(script, config)
    assert frameworks.edit(ctx, {"intervention": "fused-optimizer"}, {}, "lightning") is None
    assert "autocast" not in diff
    assert not notes["dataloader-workers"]["applied"]          # generic: no DataLoader site observed
    assert all(notes[n]["applied"] for n in ("amp", "torch-compile", "tf32", "cudnn-benchmark", "channels-last"))


def test_lightning_pl_alias_keyword_model_and_nothing_to_do(tmp_path):
    script = _write(tmp_path, '''\
        import pytorch_lightning as pl
        from mymod import Net

        net = Net()
        trainer = pl.Trainer(precision="bf16-mixed", benchmark=True)
        trainer.fit(model=net)
        trainer.fit(model=Net())
        ''')
    diff, notes, new, _ = _patch(script, [{"intervention": "amp", "params": {}},
                                          {"intervention": "cudnn-benchmark", "params": {}},
                                          {"intervention": "torch-compile", "params": {}}], {},
                                 executed={"train.py": [1, 2, 4, 5, 6]})
    assert "already passes precision" in notes["amp"]["reason"]
    assert "already passes benchmark" in notes["cudnn-benchmark"]["reason"]
    assert "+trainer.fit(model=torch.compile(net))\n" in diff and "import torch" in new
    # the unpassed fit of a non-name model is not the one edited (it did not run)
    assert "trainer.fit(model=Net())" in new


def test_lightning_trainer_takes_every_keyword_written():
    spec = importlib.util.find_spec("lightning") or importlib.util.find_spec("pytorch_lightning")
    if spec is None:
        pytest.skip("Lightning is not installed")
    base = os.path.dirname(spec.origin)
    pkg = os.path.join(base, "pytorch") if os.path.isdir(os.path.join(base, "pytorch")) else base
    src = open(os.path.join(pkg, "trainer", "trainer.py"), encoding="utf-8").read()
    cls = next(n for n in ast.parse(src).body if isinstance(n, ast.ClassDef) and n.name == "Trainer")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assert {"precision", "benchmark"} <= {a.arg for a in init.args.args + init.args.kwonlyargs}
    # fit unwraps a torch.compile'd LightningModule (utilities/compile.py: from_compiled)
    assert "_maybe_unwrap_optimized(model)" in src
    fabric = os.path.join(base, "fabric", "plugins", "precision", "precision.py")     # the `lightning` package
    if frameworks._lightning_major() >= 2 and os.path.exists(fabric):
        assert '"bf16-mixed"' in open(fabric, encoding="utf-8").read() and '"16-mixed"' in open(fabric).read()


# ----------------------------------------------------------------------------- plain scripts

def test_plain_loop_with_a_transformers_model_is_not_a_framework(tmp_path, monkeypatch):
    script = _write(tmp_path, PLAIN)
    config = {"parameters": {"value": {}, "where": _site(tmp_path, "transformers", "modeling_utils.py", 5000)},
              "input": {"value": {}, "where": f"train.py:{_line(script, 'model(x)')}"},
              "zero_grad": {"value": {"set_to_none": False}, "where": f"train.py:{_line(script, 'zero_grad')}"}}
    assert frameworks.framework_of(_ctx(script, config)) is None

    def never(*a, **k):
        raise AssertionError("frameworks.edit called for a plain script")
    monkeypatch.setattr(frameworks, "edit", never)
    diff, notes, new, _ = _patch(script, [{"intervention": "amp", "params": {}},
                                          {"intervention": "set-to-none", "params": {}}], config)
    assert diff == ('--- a/train.py\n+++ b/train.py\n@@ -4,8 +4,9 @@\n'
                    ' model = AutoModel.from_pretrained("tiny")\n opt = torch.optim.AdamW(model.parameters())\n'
                    ' for x in range(3):\n-    out = model(x)\n-    loss = out.sum()\n'
                    '+    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):\n'
                    '+        out = model(x)\n+        loss = out.sum()\n     loss.backward()\n     opt.step()\n'
                    '-    opt.zero_grad(set_to_none=False)\n+    opt.zero_grad(set_to_none=True)\n')


def test_a_trainer_that_did_not_run_is_not_the_loop(tmp_path):
    script = _write(tmp_path, PLAIN + 'if False:\n    from transformers import Trainer\n    Trainer(model=model).train()\n')
    ran = [n for n in range(1, 13)]
    assert frameworks.framework_of(_ctx(script, executed={"train.py": ran})) is None
    assert frameworks.framework_of(_ctx(script)) == "transformers"    # no record of what ran: it may have
