"""The analyze's samples cache: the samples one trial precomputes or preloads are loaded by
the next trial of the same dataset, and each trial's one-off cost stays the user's (the
computing), not the cache's."""

from __future__ import annotations

import json

import pytest
import torch
from test_runner_support import write

from advisor import measure
from advisor.interventions import precompute, preload, samples_cache
from advisor.runner.parent import run_child


class Counted(torch.utils.data.Dataset):
    """Samples made from a seed, each read counted."""

    def __init__(self, n=40, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.images = torch.randint(0, 255, (n, 3, 4, 4), dtype=torch.uint8, generator=g)
        self.reads = 0

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        self.reads += 1
        return self.images[i].float() / 255.0, torch.tensor(i % 3)   # a 0-d label, as TensorDataset gives


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(samples_cache.ENV, str(tmp_path / "samples"))
    monkeypatch.setattr(samples_cache, "_events", [])
    return tmp_path / "samples"


def test_a_second_process_loads_the_samples_the_first_computed(cache_dir):
    first = precompute.precompute(Counted())
    assert [e.keys() >= {"built_s", "saved_s"} for e in samples_cache.events()] == [True]
    again = Counted()
    second = precompute.precompute(again)
    assert again.reads == samples_cache.PROBES   # the fingerprint's reads, not the 40 samples
    assert "loaded_s" in samples_cache.events()[-1]
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(first, second))


def test_another_datasets_samples_are_not_taken_for_these(cache_dir):
    precompute.precompute(Counted(seed=0))
    other = Counted(seed=1)   # same class and length, other content
    got = precompute.precompute(other)
    assert other.reads == samples_cache.PROBES + 40 and torch.equal(got[5][0], other.images[5].float() / 255.0)
    assert sorted(p.name.split("-")[0] for p in cache_dir.glob("*.pt")) == ["samples", "samples"]


def test_preload_caches_the_collated_tensors_and_serves_the_same_batches(cache_dir):
    a = preload.preload(Counted(), torch.device("cpu"))
    b = preload.preload(Counted(), torch.device("cpu"))
    assert [p.name.split("-")[0] for p in cache_dir.glob("*.pt")] == ["collated"]
    assert "loaded_s" in samples_cache.events()[-1]
    assert all(torch.equal(x, y) for x, y in zip(a._data, b._data))


def test_without_the_run_directory_nothing_is_saved(tmp_path, monkeypatch):
    monkeypatch.delenv(samples_cache.ENV, raising=False)
    monkeypatch.setattr(samples_cache, "_events", [])
    ds = Counted()
    precompute.precompute(ds)
    assert ds.reads == 40 and samples_cache.events() == []


def test_the_one_off_cost_counts_the_computing_not_the_load_or_the_save():
    base = {"startup": {"script": 0.0, "first_step": 2.0}, "step_times_ms": [100.0] * 4}
    loaded = {**base, "samples_cache": [{"kind": "collated", "built_s": 30.0, "loaded_s": 1.5}]}
    saved = {**base, "startup": {"script": 0.0, "first_step": 35.0},
             "samples_cache": [{"kind": "collated", "built_s": 30.0, "saved_s": 3.0}]}
    assert measure.lead_in_s(base) == pytest.approx(1.9)
    assert measure.lead_in_s(loaded) == pytest.approx(1.9 + 28.5)
    assert measure.lead_in_s(saved) == pytest.approx(31.9)


def test_trial_processes_share_the_samples_through_the_run_directory(tmp_path):
    """Two real trial processes of one analyze: the second loads what the first preloaded, trains
    on the same batches, and counts the computing in its one-off cost."""
    script = write(tmp_path / "train.py", """
        import torch
        class Made(torch.utils.data.Dataset):
            def __len__(self): return 256
            def __getitem__(self, i):
                g = torch.Generator().manual_seed(i)
                return torch.rand(8, generator=g), i % 2
        loader = torch.utils.data.DataLoader(Made(), batch_size=16, shuffle=True)
        model = torch.nn.Linear(8, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(100):
            for x, y in loader:
                torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step(); opt.zero_grad()
    """)
    run = tmp_path / "run"
    runs = []
    for name in ("01-preload-dataset", "02-amp"):
        spec = {"script": str(script), "argv": ["train.py"], "cwd": str(tmp_path), "run_dir": str(run / "trials" / name),
                "run_name": name, "warmup_steps": 1, "profile_steps": 0, "measure_steps": 4,
                "record_memory": False, "with_stack": False, "tb_dir": str(tmp_path / "tb"), "seed": 0,
                "environ": {samples_cache.ENV: str(run / "cache" / "samples")},
                "interventions": [{"name": "preload-dataset", "params": {"device": "cpu"}}]}
        res = run_child(spec, timeout=120, step_timeout=60)
        assert res["status"] == "complete", res["incomplete_reasons"]
        runs.append(json.loads((run / "trials" / name / "child.json").read_text()))
    assert [sorted(e) for e in runs[0]["samples_cache"]] == [["built_s", "kind", "saved_s"]]
    assert [sorted(e) for e in runs[1]["samples_cache"]] == [["built_s", "kind", "loaded_s"]]
    assert runs[0]["losses"][:4] == runs[1]["losses"][:4]   # the same samples, in the same order
    assert measure.samples_cache_s(runs[1]) == pytest.approx(
        runs[1]["samples_cache"][0]["built_s"] - runs[1]["samples_cache"][0]["loaded_s"])


def test_a_refusal_on_time_reads_what_an_earlier_trial_measured(cache_dir, monkeypatch):
    """The time limit is judged on the computing an earlier trial of the analyze measured, not on
    a new estimate from a few samples (on an H100 one trial computed 60,000 samples in 33.6 s,
    and the next refused them on an estimate of 63 s against the 60 s limit: its verdict was read
    on a stack without the preload)."""
    ds = Counted()
    assert precompute.plan(ds, max_seconds=1e-9) is not None and samples_cache.built_seconds(ds) is None
    precompute.precompute(Counted())            # an earlier trial computed and saved them
    assert samples_cache.built_seconds(Counted()) == pytest.approx(samples_cache.events()[0]["built_s"])
    assert precompute.plan(Counted(seed=1), max_seconds=1e-9) is not None   # estimated: refused
    monkeypatch.setattr(samples_cache, "built_seconds", lambda d: 0.0)
    assert precompute.plan(Counted(seed=1), max_seconds=1e-9) is None        # measured: taken
    monkeypatch.setattr(samples_cache, "built_seconds", lambda d: 90.0)
    assert "took 90 s in an earlier trial" in precompute.plan(Counted(), max_seconds=60.0)
