"""The preload-dataset intervention: a deterministic dataset is collated once into tensors
on the device, and every batch is one gather with the DataLoader's own sampler — the same
batches, in the same order, from the same random stream, without workers."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from test_precompute import Augmenting, Converting
from test_runner_support import write

from advisor import measure
from advisor.interventions import epoch_ahead, preload
from advisor.runner.parent import run_child

REPO = Path(__file__).resolve().parent.parent
Pair = collections.namedtuple("Pair", "x y")


class Dicts(Converting):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return {"image": x, "label": y, "pair": Pair(x[0], float(i))}


class Named(Converting):
    def __getitem__(self, i):
        return Converting.__getitem__(self, i)[0], f"sample-{i}"


@pytest.fixture
def applied():
    original = torch.utils.data.DataLoader.__init__
    preload.apply({"device": "cpu"})
    yield
    torch.utils.data.DataLoader.__init__ = original


def _epochs(make_loader, seed: int, epochs: int = 2) -> tuple[list, torch.Tensor]:
    torch.manual_seed(seed)
    loader = make_loader()
    batches = [b for _ in range(epochs) for b in loader]
    return batches, torch.rand(3)  # where the script's random stream stands afterwards


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return type(a) is type(b) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("dataset,persistent,generator,fast", [
    (Converting, True, None, True),      # index tensors made in one randperm
    (Dicts, False, None, True),
    (Converting, False, 5, False),       # a generator of the script's own: the sampler's lists
])
def test_batches_and_random_stream_are_the_dataloaders(dataset, persistent, generator, fast, applied):
    def make():
        g = torch.Generator().manual_seed(generator) if generator is not None else None
        return torch.utils.data.DataLoader(dataset(21), batch_size=4, shuffle=True, num_workers=2,
                                           persistent_workers=persistent, drop_last=dataset is Dicts, generator=g)
    got, after = _epochs(make, seed=3)
    init = torch.utils.data.DataLoader.__init__
    torch.utils.data.DataLoader.__init__ = init.__advisor_original__
    try:
        want, want_after = _epochs(make, seed=3)
    finally:
        torch.utils.data.DataLoader.__init__ = init
    assert len(got) == len(want) == (10 if dataset is Dicts else 12)
    assert all(_same(g, w) for g, w in zip(got, want))
    assert torch.equal(after, want_after)
    loader = make()
    assert loader.num_workers == 0 and isinstance(loader.dataset, preload.Preloaded)
    assert preload._fast_indices_match(loader) is fast
    assert loader.dataset.classes == ["a", "b"] and len(loader) == (5 if dataset is Dicts else 6)


def test_what_cannot_be_preloaded_is_refused_with_a_reason():
    cpu = torch.device("cpu")
    assert "differs between two reads" in preload.plan(Augmenting(), {}, cpu)
    assert "collate_fn" in preload.plan(Converting(), {"collate_fn": lambda b: b}, cpu)
    assert "other than tensors" in preload.plan(Named(), {}, cpu)
    assert "batch_size=None" in preload.plan(Converting(), {"batch_size": None}, cpu)
    assert "GiB" in preload.plan(Converting(), {}, cpu, max_bytes=100)
    assert preload.plan(Converting(), {"collate_fn": torch.utils.data.default_collate}, cpu) is None


def test_trial_child_trains_on_preloaded_batches(tmp_path):
    script = write(tmp_path / "train.py", """
        import torch
        class Data(torch.utils.data.Dataset):
            def __len__(self): return 64
            def __getitem__(self, i): return torch.full((2,), float(i)), i % 2
        loader = torch.utils.data.DataLoader(Data(), batch_size=8, shuffle=True, num_workers=2, pin_memory=False)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.001)
        for epoch in range(100):
            for x, y in loader:
                assert torch.equal(x[:, 0], x[:, 1]) and x.shape == (8, 2) and y.dtype == torch.int64
                (model(x).squeeze(1) - y).pow(2).mean().backward(); opt.step(); opt.zero_grad()
    """)
    spec = {"script": str(script), "argv": ["train.py"], "cwd": str(tmp_path), "run_dir": str(tmp_path / "run"),
            "run_name": "01-trial", "warmup_steps": 1, "profile_steps": 0, "measure_steps": 4,
            "record_memory": False, "with_stack": False, "sandbox_writes": True, "tb_dir": str(tmp_path / "tb"),
            "seed": 0, "interventions": [{"name": "dataloader-workers", "params": {"num_workers": 2}},
                                         {"name": "preload-dataset", "params": {}}]}
    res = run_child(spec, timeout=120, step_timeout=60)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert not [n for n in res["notes"] if "not applied" in n]
    assert any(line.startswith("Dataset preloaded once as tensors on cpu") for line in res["interventions_applied"])


def _worker_idle():
    """Until the permutations asked for are made: the time a training step gives the worker."""
    with epoch_ahead._cond:
        epoch_ahead._cond.wait_for(lambda: not epoch_ahead._queue and epoch_ahead._running is None, 30)


def _between_epochs(kind: str, loaders: list):
    """What the script does between two epochs of the shuffled loader."""
    if kind == "draws":
        torch.rand(2)                                   # a CPU draw: the guess is stale
    elif kind == "seeds":
        torch.manual_seed(11)                           # reseeded: the guess is stale
    elif kind == "validation":
        for _ in loaders[1]:                            # its base seed is a global draw too
            pass
    elif kind == "two shuffled":
        for _ in loaders[1]:
            pass


@pytest.mark.parametrize("between,persistent,hits,misses", [
    ("nothing", False, 3, 0),
    ("nothing", True, 3, 0),        # a kept iterator draws no base seed
    ("draws", False, 0, 3),
    ("seeds", False, 0, 3),
    ("validation", False, 3, 0),    # guessed again after the validation loader's draw
    ("two shuffled", False, 3, 0),
    ("early break", False, 2, 0),   # the epoch cut short made no guess; the next is made now
    ("loader generator", False, 3, 0),  # the iterator's base seed comes from the loader's generator
])
def test_next_permutation_is_made_ahead_and_the_batches_are_unchanged(between, persistent, hits, misses, applied):
    def make():
        if between == "loader generator":  # its RandomSampler has none: the global one shuffles
            ds = Converting(50)
            train = torch.utils.data.DataLoader(ds, batch_size=4, sampler=torch.utils.data.RandomSampler(ds),
                                                generator=torch.Generator().manual_seed(3))
        else:
            train = torch.utils.data.DataLoader(Converting(50), batch_size=4, shuffle=True, num_workers=2,
                                                persistent_workers=persistent)
        other = torch.utils.data.DataLoader(Converting(9), batch_size=2, shuffle=between == "two shuffled")
        return [train, other]

    def run():
        torch.manual_seed(5)
        loaders = make()
        batches = []
        for epoch in range(4):
            for i, b in enumerate(loaders[0]):
                batches.append(b)
                if between == "early break" and epoch == 1 and i == 2:
                    break
            _worker_idle()  # the time the training steps give the worker
            _between_epochs(between, loaders)
            _worker_idle()
            batches.append(("epoch end", epoch))
        if between == "two shuffled":
            batches.extend(loaders[1])
        return batches, torch.rand(3), loaders

    got, after, loaders = run()
    init = torch.utils.data.DataLoader.__init__
    torch.utils.data.DataLoader.__init__ = init.__advisor_original__
    try:
        want, want_after, _ = run()
    finally:
        torch.utils.data.DataLoader.__init__ = init
    assert len(got) == len(want) and all(_same(g, w) for g, w in zip(got, want))
    assert torch.equal(after, want_after)  # the global stream advanced exactly as the sampler's
    spec = loaders[0]._preload_speculation
    assert (spec.hits, spec.misses) == (hits, misses)
    if between == "two shuffled":
        assert loaders[1]._preload_speculation.hits == 4  # each loader's guess follows the other's draws
    else:
        assert loaders[1]._preload_speculation is None   # sequential: nothing to guess


def test_permutation_made_ahead_is_randperms_and_leaves_the_global_stream():
    torch.manual_seed(1)
    spec = epoch_ahead.Speculation(1000, pin=False, skip=1)
    state = torch.get_rng_state()
    spec.arm()
    assert torch.equal(torch.get_rng_state(), state)  # guessed from a copy
    torch.empty((), dtype=torch.int64).random_()      # the new iterator's base seed
    seed = int(torch.empty((), dtype=torch.int64).random_().item())
    order = spec.take(seed)
    assert spec.hits == 1 and torch.equal(order, torch.randperm(1000, generator=torch.Generator().manual_seed(seed)))
    assert spec.take(seed) is None and (spec.hits, spec.misses) == (1, 0)  # not armed: nothing guessed


def test_process_exits_while_a_permutation_is_being_made(tmp_path):
    script = write(tmp_path / "exit.py", """
        from advisor.interventions import epoch_ahead
        epoch_ahead.Speculation(50_000_000, pin=False, skip=0).arm()  # a randperm of seconds, under way
        print("armed", epoch_ahead._worker.daemon, flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "armed True"


@pytest.mark.parametrize("fix", ["preload-dataset", "precompute-samples"])
def test_a_transform_module_called_while_the_dataset_is_read_is_not_the_model(tmp_path, fix):
    """torchvision's Normalize is an nn.Module: reading the dataset in the main process to
    store it ran it on one sample, and that input was taken as the model's batch (1)."""
    script = write(tmp_path / "train.py", """
        import torch
        class Normalize(torch.nn.Module):
            def forward(self, x): return (x - 0.5) / 0.25
        class Data(torch.utils.data.Dataset):
            norm = Normalize()
            def __len__(self): return 64
            def __getitem__(self, i): return self.norm(torch.full((1, 4, 4), i / 64)), i % 2
        loader = torch.utils.data.DataLoader(Data(), batch_size=16, shuffle=True)
        model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(16, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(100):
            for x, y in loader:
                torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step(); opt.zero_grad()
    """)
    spec = {"script": str(script), "argv": ["train.py"], "cwd": str(tmp_path), "run_dir": str(tmp_path / "run"),
            "run_name": "01-trial", "warmup_steps": 2, "profile_steps": 0, "measure_steps": 4,
            "record_memory": False, "with_stack": False, "sandbox_writes": True, "tb_dir": str(tmp_path / "tb"),
            "seed": 0, "interventions": [{"name": fix, "params": {}}]}
    res = run_child(spec, timeout=120, step_timeout=60)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert not [n for n in res["notes"] if "not applied" in n]
    assert (res["batch_size"], res["batch_size_source"]) == (16, "dataloader")
    assert measure.micro_batches(res) == 1
