"""activation-checkpointing: the model's repeated blocks recompute their activations in the
backward, with the batch doubled into the memory that frees; measured apart. Real child runs on
the CPU: the trial's run-time switch (a plain model's blocks, a Hugging Face model's own), the
patch's edit run as plain python, and the apart measurement in a whole analyze."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from test_patch import _repo, apply
from test_runner_support import STEP_GUARD, run_advised, write

from advisor.fixes import make_patch

ROOT = Path(__file__).resolve().parents[1]
TINY_LM = ROOT / "tests" / "fixtures" / "scripts" / "tiny_causal_lm.py"

BLOCKS = """
    import torch

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ff = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32))

        def forward(self, x):
            return x + self.ff(x)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = torch.nn.ModuleList([Block() for _ in range(3)])
            self.head = torch.nn.Linear(32, 4)

        def forward(self, x):
            for b in self.blocks:
                x = b(x)
            return self.head(x)

    torch.manual_seed(0)
    model = Net()
    data = torch.utils.data.TensorDataset(torch.randn(256, 32), torch.randint(0, 4, (256,)))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
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


def _advised(capfd, tmp_path, script, argv, fixes):
    res, out, err, _ = run_advised(capfd, script, argv, str(tmp_path), str(tmp_path / "run"), timeout=300,
                                   step_timeout=STEP_GUARD, warmup_steps=2, profile_steps=0, measure_steps=3,
                                   measure_min_s=0, interventions=fixes)
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    return res


def test_the_trial_checkpoints_a_plain_models_blocks_with_the_batch_doubled(capfd, tmp_path):
    script = write(tmp_path / "train.py", BLOCKS)
    plain = _advised(capfd, tmp_path, script, ["train.py"], [])
    assert "activation_checkpointing" not in plain["config"] and plain["batch_size"] == 8
    res = _advised(capfd, tmp_path, script, ["train.py"], [{"name": "activation-checkpointing", "params": {"factor": 2}}])
    calls = res["config"]["activation_checkpointing"]["value"]["calls"]
    assert calls >= 3 * 5 and calls % 3 == 0   # the three blocks at every training step seen
    assert res["batch_size"] == 16


def test_a_hugging_face_model_switches_on_its_own_gradient_checkpointing(capfd, tmp_path):
    res = _advised(capfd, tmp_path, TINY_LM, [str(TINY_LM), "--steps", "12"],
                   [{"name": "activation-checkpointing", "params": {"factor": 1}}])
    assert res["config"]["activation_checkpointing"]["value"]["calls"] >= 2 * 5   # its two layers


def test_the_patch_checkpoints_the_blocks_and_doubles_the_batch_as_plain_python(tmp_path):
    import textwrap

    repo_script = _repo(tmp_path, Path("train.py"), text=textwrap.dedent(BLOCKS))
    text = repo_script.read_text().splitlines()
    line = next(i for i, t in enumerate(text, 1) if t.startswith("model = Net()"))
    loader = next(i for i, t in enumerate(text, 1) if t.startswith("loader = "))
    config = {"model": {"value": {}, "where": f"train.py:{line}"}, "parameters": {"value": {}, "where": f"train.py:{line}"},
              "dataloader": {"value": {"batch_size": 8}, "where": f"train.py:{loader}"}}
    diff, notes = make_patch(str(repo_script), [{"intervention": "activation-checkpointing", "params": {"factor": 2}}], config)
    assert [n["applied"] for n in notes] == [True], notes
    assert "+model = _checkpoint_blocks(model)" in diff and "+def _checkpoint_blocks(model):" in diff
    assert "batch_size=16" in diff
    apply(repo_script, diff)
    probe = repo_script.read_text() + "\nprint('wrapped', sum(b.forward.__name__ == 'forward' and hasattr(b.forward, '__wrapped__') " \
                                       "for b in model.blocks))\n"
    repo_script.write_text(probe)
    out = subprocess.run([sys.executable, str(repo_script)], capture_output=True, text=True, timeout=300,
                         cwd=repo_script.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "done" in out.stdout and "wrapped 3" in out.stdout


def test_an_analyze_measures_it_apart_on_top_of_the_kept_stack(tmp_path):
    script = write(tmp_path / "train.py", BLOCKS)
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--out", str(out), "--fix", "activation-checkpointing",
                        "--no-verify", "--warmup", "3", "--steps", "6", "--min-time", "0", "--profile-steps", "1",
                        str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((out / "run.json").read_text())
    rec = next(t for t in doc["trials"] if t["name"] == "apart-activation-checkpointing-x2")
    assert rec["apart"] and rec["status"] in ("measured", "rejected") and rec["batch_size"] == 16
    assert "scale the learning rate" in rec["reason"]
    # apart: never kept in the stack, nor written into fixes.patch
    assert not any(t["fix"] == "activation-checkpointing" and t["status"] == "accepted" for t in doc["trials"])
    assert "_checkpoint_blocks" not in ((out / "fixes.patch").read_text() if (out / "fixes.patch").exists() else "")


def test_under_apply_the_check_counts_from_the_scripts_own_batch():
    """--apply activation-checkpointing:factor=2 runs the baseline with the batch doubled already;
    the patched run's batch is held to twice the script's own batch, not four times."""
    from advisor import verify

    applied = [{"name": "activation-checkpointing", "params": {"factor": 2}}]
    base = {"batch_size": 64}   # the script's 32, doubled at run time
    assert verify.as_written(base, applied) == {"batch_size": 32}
    assert verify.as_written(base, []) is base
    config = {"dataloader": {"value": {"batch_size": 64}}, "activation_checkpointing": {"value": {"calls": 54}}}
    fixes = [{"intervention": "activation-checkpointing", "params": {"factor": 2}}]
    notes = [{"intervention": "activation-checkpointing", "applied": True, "where": "train.py:48"}]
    row = verify.checks(fixes, notes, config, verify.as_written(base, applied))[0]
    assert row["took_effect"] is True and row["expected"] == "torch.utils.checkpoint in the steps, batch size 64"
    assert verify.checks(fixes, notes, {**config, "dataloader": {"value": {"batch_size": 32}}},
                         verify.as_written(base, applied))[0]["took_effect"] is False
