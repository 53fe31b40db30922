"""Steps where no torch.optim optimizer steps (runner/updates.py): a backward pass followed by an
update of its parameters is a step, found in the unmodified script. Real scripts, real runs."""

from __future__ import annotations

import json
import math
import os

import pytest
from test_cli import advisor
from test_runner_support import run_advised, write

# The Karpathy-style language-model loop: no optimizer, the parameters updated by hand. UPDATE
# is the update of one parameter p (under no_grad).
LM = """
import torch
torch.manual_seed(0)
data = torch.randint(0, 64, (20000,))
model = torch.nn.Sequential(torch.nn.Embedding(64, 32), torch.nn.Linear(32, 64))
lr = 0.1
for it in range(ITERS):
    ix = torch.randint(0, len(data) - 9, (16,))
    x = torch.stack([data[i:i+8] for i in ix]); y = torch.stack([data[i+1:i+9] for i in ix])
    loss = torch.nn.functional.cross_entropy(model(x).view(-1, 64), y.view(-1))
    model.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            UPDATE
print("finished")
"""


def _lm(update: str, iters: int = 2000) -> str:
    return LM.replace("UPDATE", update).replace("ITERS", str(iters))


def _analyze(tmp_path, source: str, *args):
    write(tmp_path / "lm.py", source)
    r = advisor("analyze", "--out", tmp_path / "run", *args, "lm.py", cwd=tmp_path, timeout=600)
    return r, json.loads((tmp_path / "run" / "run.json").read_text())


@pytest.mark.parametrize("update", ["p.data.add_(p.grad, alpha=-lr)", "p -= lr * p.grad"])
def test_a_hand_updated_loop_is_analyzed(tmp_path, update):
    r, doc = _analyze(tmp_path, _lm(update), "--no-trials", "--warmup", "2", "--steps", "10", "--min-time", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    assert doc["status"] == "complete", doc["incomplete_reasons"]
    assert doc["step_source"] == "parameter-update"
    meas = doc["measurement"]
    assert meas["steps_measured"] >= 10
    # a step of this loop is milliseconds on any CPU: not a run of the whole loop, not nothing
    assert 0.01 < meas["step_time_ms"] < 5000 and meas["batch_size"] == 16
    assert doc["analysis"]["steps_in_trace"] >= 1
    # one backward and one forward a step: each update ended one step
    child = json.loads((tmp_path / "run" / "child.json").read_text())
    assert child["step_counts"] and all(row[1:] == [1, 1] for row in child["step_counts"])
    said = " ".join(doc["notes"]).replace("\n", "")
    assert "steps counted by parameter updates" in said
    assert "steps counted by parameter updates" in " ".join(r.stderr.split())   # the terminal's note
    assert "finished" not in r.stdout   # stopped by advisor, long before the loop's end


# A hand-updated loop fed by a slow DataLoader: trials of real fixes (workers, preload) run on it.
SLOW_LOADER = """
import time, torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __len__(self): return 100000
    def __getitem__(self, i):
        time.sleep(0.0005)
        return torch.randn(8), torch.randn(1)

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
for x, y in DataLoader(Slow(), batch_size=32):
    loss = torch.nn.functional.mse_loss(model(x), y)
    model.zero_grad()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.01 * p.grad
"""


@pytest.mark.parametrize("source", [_lm("p.data.add_(p.grad, alpha=-lr)", 100000), SLOW_LOADER],
                         ids=["lm", "slow-loader"])
def test_a_hand_updated_loop_runs_its_trials(tmp_path, source):
    r, doc = _analyze(tmp_path, source, "--budget", "0.5", "--max-trials", "2", "--steps", "10", "--min-time", "0")
    assert r.returncode == 0, r.stderr[-3000:]
    assert doc["status"] == "complete", doc["incomplete_reasons"]
    assert doc["step_source"] == "parameter-update"
    ran = [t for t in doc["trials"] if t["status"] not in ("skipped", "not run")]
    assert ran and all(t["status"] != "failed" for t in ran), [(t["name"], t["status"]) for t in ran]
    children = {c.parent.name: json.loads(c.read_text()) for c in (tmp_path / "run" / "trials").glob("*/child.json")}
    # a trial whose fix refused to apply stopped before its first step (it found none): skipped
    refused = {name for name, c in children.items() if c.get("refused")}
    assert all(children[n]["steps_seen"] == 0 for n in refused)
    assert all(t["status"] == "skipped" for t in doc["trials"] if t["name"] in refused)
    stepped = [c for name, c in children.items() if name not in refused]
    assert stepped and all(c["step_source"] == "parameter-update" for c in stepped)


def _run(capfd, tmp_path, source: str, **kw):
    script = write(tmp_path / "train.py", source)
    kw = {"warmup_steps": 2, "measure_steps": 5, "profile_steps": 2, **kw}
    return run_advised(capfd, script, ["train.py"], str(tmp_path), str(tmp_path / "run"), **kw)


def test_gradient_accumulation_is_one_step_an_update(tmp_path, capfd):
    """Four backward passes, then one update: one step. The script checks that Tensor.data is
    not wrapped once its in-place updates were seen (updates.py unwraps it then)."""
    res, out, err, _ = _run(capfd, tmp_path, """
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        params = list(model.parameters())
        for it in range(100000):
            for micro in range(4):
                x = torch.randn(8, 8)
                loss = model(x).pow(2).mean() / 4
                loss.backward()
            with torch.no_grad():
                torch._foreach_add_(params, [p.grad for p in params], alpha=-0.01)
            for p in params:
                p.grad = None
            assert it < 2 or "data" not in vars(torch.Tensor), "Tensor.data still wrapped"
    """)
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    assert res["step_source"] == "parameter-update"
    assert res["steps_seen"] == 10 and len(res["step_times_ms"]) == 5
    assert res["step_counts"] and all(row == [0, 4, 4] for row in res["step_counts"])
    assert res["config"]["gradient_accumulation"]["value"] == {"micro_batches": 4}
    assert len(res["losses"]) == 10 and all(math.isfinite(x) for x in res["losses"])


def test_plain_tensors_updated_through_data(tmp_path, capfd):
    """makemore's loop: no module, a list of leaf tensors, ``p.data += -lr * p.grad``: only the
    backward is seen, and the update goes through .data aliases."""
    res, out, err, _ = _run(capfd, tmp_path, """
        import torch
        g = torch.Generator().manual_seed(0)
        C = torch.randn((27, 10), generator=g)
        W1, b1 = torch.randn((30, 64), generator=g), torch.randn(64, generator=g)
        W2, b2 = torch.randn((64, 27), generator=g), torch.randn(27, generator=g)
        parameters = [C, W1, b1, W2, b2]
        for p in parameters:
            p.requires_grad = True
        X, Y = torch.randint(0, 27, (1000, 3)), torch.randint(0, 27, (1000,))
        for i in range(100000):
            ix = torch.randint(0, X.shape[0], (32,))
            h = torch.tanh(C[X[ix]].view(-1, 30) @ W1 + b1)
            loss = torch.nn.functional.cross_entropy(h @ W2 + b2, Y[ix])
            for p in parameters:
                p.grad = None
            loss.backward()
            for p in parameters:
                p.data += -0.1 * p.grad
    """)
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    assert res["step_source"] == "parameter-update"
    assert res["steps_seen"] == 10 and len(res["step_times_ms"]) == 5
    assert all(row == [0, 1, 0] for row in res["step_counts"])   # no module: no forward seen


def test_a_hand_written_optimizer_class(tmp_path, capfd):
    """An optimizer of the script's own (not a torch.optim.Optimizer) with momentum, fed by a
    DataLoader of 6 batches an epoch, with an evaluation pass after each: its step() updating
    .data in place ends each step."""
    res, out, err, _ = _run(capfd, tmp_path, """
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        class Momentum:
            def __init__(self, params, lr=0.01, beta=0.9):
                self.params, self.lr, self.beta = list(params), lr, beta
                self.bufs = [torch.zeros_like(p) for p in self.params]
            def zero_grad(self):
                for p in self.params:
                    p.grad = None
            @torch.no_grad()
            def step(self):
                for p, b in zip(self.params, self.bufs):
                    b.mul_(self.beta).add_(p.grad)
                    p.data.add_(b, alpha=-self.lr)

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        opt = Momentum(model.parameters())
        loader = DataLoader(TensorDataset(torch.randn(192, 8), torch.randn(192, 1)), batch_size=32)
        for epoch in range(1000):
            model.train()
            for x, y in loader:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            model.eval()
            with torch.no_grad():   # an evaluation pass: no backward, no step
                model(torch.randn(64, 8))
    """)
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    assert res["step_source"] == "parameter-update"
    assert res["steps_seen"] == 10 and len(res["step_times_ms"]) == 5
    assert res["batch_size"] == 32 and res["batch_size_source"] == "dataloader"
    assert all(row == [1, 1, 1] for row in res["step_counts"])
    assert "optimizer" not in res["config"]


def test_a_torch_optimizer_still_counts_the_steps(tmp_path, capfd):
    """An ordinary torch.optim loop: its optimizer's steps are the steps, none counted twice,
    though a dry run's backward comes before the optimizer is made and a forward under no_grad
    comes between each backward and the optimizer's step. The script counts its own steps."""
    count = tmp_path / "steps.txt"
    res, out, err, _ = _run(capfd, tmp_path, f"""
        import torch
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
        model(torch.randn(2, 8)).sum().backward()   # a dry run, before the optimizer
        model.zero_grad()
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        steps = 0
        for it in range(100000):
            opt.zero_grad(set_to_none=True)
            model(torch.randn(32, 8)).pow(2).mean().backward()
            with torch.no_grad():
                model(torch.randn(4, 8))   # a look at the model between backward and step
            opt.step()
            steps += 1
            open({str(count)!r}, "w").write(str(steps))
            assert "data" not in vars(torch.Tensor), "Tensor.data wrapped beside an optimizer"
    """)
    assert res["status"] == "complete", (res["incomplete_reasons"], err[-2000:])
    assert res["step_source"] == "optimizer-hook"
    assert res["steps_seen"] == 10
    # the last (profiled) step ends at the next hooked event, after the script counted it
    assert int(count.read_text()) == 10
    assert res["config"]["optimizer"]["value"]["class"] == "SGD"


@pytest.mark.parametrize("loop", [
    "with torch.no_grad():\n        model(torch.randn(32, 8))",
    # gradients of the input (a saliency map): a backward, and no parameter changes
    "x = torch.randn(32, 8, requires_grad=True)\n    model(x).sum().backward()\n    model.zero_grad()",
])
def test_a_loop_that_updates_nothing_has_no_step(tmp_path, capfd, loop):
    res, out, err, _ = _run(capfd, tmp_path, f"""
import torch
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)).eval()
for it in range(200):
    {loop}
print("done")
""", step_timeout=60)
    assert out.strip().endswith("done")   # the script ran to its end
    assert res["status"] == "incomplete" and res["steps_seen"] == 0
    assert res["incomplete_reasons"] == [
        "script finished without a training step: no torch.optim optimizer stepped, no backward pass "
        "was followed by an update of its parameters, and advisor.step() was never called"]
    assert os.path.isfile(tmp_path / "run" / "child.json")
