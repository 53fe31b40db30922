"""The precompute-samples intervention: deterministic datasets are computed once before
training (and the loader serves the stored samples); random ones are refused with a reason."""

from __future__ import annotations

import random

import torch
from test_runner_support import write

from advisor.host import usable_cpus
from advisor.interventions import precompute
from advisor.runner.parent import run_child


class Converting(torch.utils.data.Dataset):
    """uint8 images converted per read, like the slow CIFAR recipe."""

    def __init__(self, n=20):
        g = torch.Generator().manual_seed(0)
        self.images = torch.randint(0, 255, (n, 3, 4, 4), dtype=torch.uint8, generator=g)
        self.reads = 0
        self.classes = ["a", "b"]

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        self.reads += 1
        return self.images[i].float() / 255.0, i % 2


class Augmenting(Converting):
    def __getitem__(self, i):
        x, y = super().__getitem__(i)
        return x + torch.rand(1), y


def test_deterministic_dataset_is_computed_once_and_keeps_its_attributes():
    ds = Converting()
    assert precompute.plan(ds) is None
    torch.manual_seed(1)
    random.seed(1)
    before = (torch.rand(1), random.random())
    torch.manual_seed(1)
    random.seed(1)
    cached = precompute.precompute(ds)
    assert (torch.rand(1), random.random()) == before  # the script's random stream is untouched
    reads = ds.reads
    assert len(cached) == 20 and cached.classes == ["a", "b"]
    for i in range(20):
        x, y = cached[i]
        assert torch.equal(x, ds.images[i].float() / 255.0) and y == i % 2
    assert ds.reads == reads  # served from storage
    loader = torch.utils.data.DataLoader(cached, batch_size=8, num_workers=2)
    assert sum(len(b[0]) for b in loader) == 20


def test_random_or_large_datasets_are_refused():
    state = torch.get_rng_state()
    assert "differs between two reads" in precompute.plan(Augmenting())
    assert torch.equal(torch.get_rng_state(), state)  # the probes drew from a restored generator
    assert "GiB" in precompute.plan(Converting(), max_bytes=100)
    class Stream(torch.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    assert "map-style" in precompute.plan(Stream())


def test_trial_child_refuses_random_transforms_with_a_note(tmp_path, capfd):
    script = write(tmp_path / "train.py", """
        import torch
        class Aug(torch.utils.data.Dataset):
            def __len__(self): return 16
            def __getitem__(self, i): return torch.rand(2), 0
        loader = torch.utils.data.DataLoader(Aug(), batch_size=4)
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for epoch in range(100):
            for x, y in loader:
                model(x).sum().backward(); opt.step(); opt.zero_grad()
    """)
    spec = {"script": str(script), "argv": ["train.py"], "cwd": str(tmp_path), "run_dir": str(tmp_path / "run"),
            "run_name": "01-trial", "warmup_steps": 1, "profile_steps": 0, "measure_steps": 2,
            "record_memory": False, "with_stack": False, "sandbox_writes": True, "tb_dir": str(tmp_path / "tb"),
            "seed": 0, "interventions": [{"name": "precompute-samples", "params": {}}]}
    res = run_child(spec, timeout=120, step_timeout=60)
    assert res["status"] == "complete", res["incomplete_reasons"]
    assert any(n.startswith("intervention not applied: precompute-samples: dataset[0] differs") for n in res["notes"])
    assert res["steps_seen"] > 0 and not res["refused"]  # not told to stop: the run is timed as it is

    # the trial's first process (stop_if_refused: the fixes it adds) stops at the refusal,
    # before a step, and is complete: nothing of it is left to time
    stopped = run_child({**spec, "run_dir": str(tmp_path / "run2"), "stop_if_refused": ["precompute-samples"]},
                        timeout=120, step_timeout=60)
    assert stopped["status"] == "complete", stopped["incomplete_reasons"]
    assert stopped["refused"] and stopped["steps_seen"] == 0 and stopped["step_times_ms"] == []
    assert any("every fix this trial adds refused to apply" in n for n in stopped["notes"])

    from advisor.trials.verdicts import judge
    for run in (res, stopped):
        status, reason, *_ = judge([run], [res], res, 0.05, False, ["precompute-samples"])
        assert status == "skipped" and "random transforms" in reason


class Slow(torch.utils.data.Dataset):
    """Samples that take a while to make, each telling the process that made it."""

    def __len__(self):
        return 4096

    def __getitem__(self, i):
        import os
        import time

        time.sleep(0.0006)   # the first chunk, timed, puts the whole at over SERIAL_S in one process
        return torch.full((2,), float(i)), {"i": i, "pid": os.getpid()}


def test_a_slow_dataset_is_computed_over_forked_processes_in_order():
    """The samples past the first chunk are made in other processes, and come back in order, as
    plain tensors (not left in shared memory, where tens of thousands would each hold a mapping);
    the script's own random streams are untouched."""
    import os

    from advisor.runtime import samples_source

    random.seed(3)
    torch.manual_seed(3)
    expected = (random.random(), torch.rand(1).item())
    random.seed(3)
    torch.manual_seed(3)
    got = precompute.precompute(Slow())
    assert (random.random(), torch.rand(1).item()) == expected
    assert [int(x[0]) for x, _ in got] == [s["i"] for _, s in got] == list(range(4096))
    makers = {s["pid"] for _, s in got[samples_source.CHUNK:]}
    assert os.getpid() not in makers and len(makers) == samples_source.processes(4096, usable_cpus())
    assert all(s["pid"] == os.getpid() for _, s in got[:samples_source.CHUNK])   # the timed first chunk
    assert not any(x.is_shared() for x, _ in got)


def test_a_quick_dataset_is_computed_in_the_calling_process():
    ds = Converting(n=3000)
    got = precompute.every_sample(ds)
    assert len(got) == 3000
    assert ds.reads == 3000   # every read here (a forked process's reads would not count)


class Views(Slow):
    """Samples that are views into one large tensor (a TensorDataset's rows), slow to read."""

    def __init__(self):
        self.data = torch.arange(4096 * 64, dtype=torch.float32).reshape(4096, 64)

    def __getitem__(self, i):
        import time

        time.sleep(0.0006)
        return self.data[i], i


def test_samples_that_view_a_large_tensor_come_back_without_it():
    """A row of a stored tensor pickled as it is would carry the whole storage (once per chunk,
    and one copy each in this process): each comes back as its own row."""
    from advisor.runtime import samples_source

    ds = Views()
    got = precompute.every_sample(ds)
    assert all(torch.equal(x, ds.data[i]) and y == i for i, (x, y) in enumerate(got))
    rest = [x for x, _ in got[samples_source.CHUNK:]]
    assert all(x.untyped_storage().nbytes() == 64 * 4 for x in rest)


class Unpicklable(Slow):
    """Samples holding a value pickle refuses (a lambda)."""

    def __getitem__(self, i):
        import time

        time.sleep(0.0006)
        return torch.full((2,), float(i)), (lambda: i)


def test_samples_that_cannot_be_pickled_are_computed_in_the_calling_process():
    got = precompute.every_sample(Unpicklable())
    assert len(got) == 4096 and [int(x[0]) for x, _ in got] == list(range(4096)) and got[4000][1]() == 4000
