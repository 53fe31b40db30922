"""The preload-dataset intervention: a deterministic dataset is collated once into tensors
on the device, and every batch is one gather with the DataLoader's own sampler — the same
batches, in the same order, from the same random stream, without workers."""

from __future__ import annotations

import collections

import pytest
import torch
from test_precompute import Augmenting, Converting
from test_runner_support import write

from advisor.interventions import preload
from advisor.runner.parent import run_child

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
