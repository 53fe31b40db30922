"""defer-syncs: a deferred .item() behaves as the number, computed the same way, read later.

The CUDA path needs a GPU (its run is committed evidence); here the Deferred number is
driven by stand-in events that say whether their copy has landed, which is all it asks of
a torch.cuda.Event.
"""

from __future__ import annotations

import copy
import json
import math
import numbers
import pickle
import random

import pytest
import torch

from advisor.interventions import deferred
from advisor.interventions.deferred import MAX_DEPTH, Deferred


class Event:
    """A torch.cuda.Event stand-in: lands when told to, or when waited on."""

    def __init__(self, landed: bool = False):
        self.landed = landed
        self.waits = 0

    def query(self) -> bool:
        return self.landed

    def synchronize(self) -> None:
        self.waits += not self.landed   # on a landed copy synchronize() returns at once
        self.landed = True


_seq = iter(range(10**9))


def item(value, landed: bool = False, stream=0):
    ev = Event(landed)
    return deferred.leaf(lambda: value, ev, stream, next(_seq)), ev


def test_running_sums_are_bit_identical_and_read_only_when_printed():
    rng = random.Random(0)
    values = [float(torch.tensor(rng.random() * 3, dtype=torch.float32)) for _ in range(40)]
    eager = 0.0
    lazy = 0.0
    events = []
    for i, v in enumerate(values):
        eager += v
        d, ev = item(v)
        events.append(ev)
        lazy += d
        avg_eager, avg_lazy = eager / (i + 1), lazy / (i + 1)
    assert isinstance(lazy, Deferred) and sum(e.waits for e in events) == 0, "nothing read yet"
    assert f"{lazy:.4f} {avg_lazy:.6f}" == f"{eager:.4f} {avg_eager:.6f}"
    assert float(lazy) == eager and repr(lazy) == repr(eager) and str(avg_lazy) == str(avg_eager)
    assert type(float(lazy)) is float


def test_a_landed_copy_folds_without_waiting():
    d, ev = item(1.5, landed=True)
    total = 2.0 + d
    assert type(total) is float and total == 3.5 and ev.waits == 0


def test_pending_chains_stay_bounded():
    total = 0.0
    events = []
    for i in range(5 * MAX_DEPTH):
        d, ev = item(float(i))
        events.append(ev)
        total = total + d
        if isinstance(total, Deferred):
            assert total._depth <= MAX_DEPTH
    assert float(total) == float(sum(range(5 * MAX_DEPTH)))
    # folding a deep chain waits for old copies only, a few times in all
    assert 0 < sum(e.waits for e in events[:-MAX_DEPTH]) <= len(events)


def test_integers_index_compare_hash_and_round():
    d, _ = item(3)
    correct = 0
    correct += d
    assert isinstance(correct, Deferred)
    assert [10, 20, 30, 40][d] == 40 and int(correct) == 3
    f, _ = item(2.5)
    assert f == 2.5 and f < 3 and f >= 2.5 and bool(f) and hash(f) == hash(2.5)
    assert round(f) == round(2.5) and round(f, 1) == 2.5 and math.floor(f) == 2 and math.isfinite(f)
    assert divmod(f, 2) == (1.0, 0.5) and -f == -2.5 and abs(-f) == 2.5 and f ** 2 == 6.25
    assert isinstance(f, numbers.Real) and f.is_integer() is False and f.real == 2.5


def test_with_a_tensor_it_acts_now_as_the_number_would():
    d, ev = item(2.0)
    out = d * torch.ones(3)
    assert isinstance(out, torch.Tensor) and out.tolist() == [2.0, 2.0, 2.0] and ev.waits == 1


def test_copies_and_pickles_are_plain_numbers():
    d, _ = item(0.25)
    assert type(copy.copy(d)) is float and copy.deepcopy({"loss": d}) == {"loss": 0.25}
    back = pickle.loads(pickle.dumps(d))
    assert type(back) is float and back == 0.25


def test_what_needs_a_real_float_fails_loudly():
    d, _ = item(0.5)
    with pytest.raises(TypeError):
        json.dumps({"loss": d})


def test_cpu_items_stay_plain_numbers():
    from advisor.interventions import defer_syncs

    orig = torch.Tensor.item
    try:
        defer_syncs.apply({})
        assert torch.Tensor.item is not orig
        v = torch.tensor(1.25).item()
        assert type(v) is float and v == 1.25
        assert type(torch.tensor(7).item()) is int
    finally:
        torch.Tensor.item = orig


def test_not_applicable_without_device_item_sites():
    from advisor.interventions import defer_syncs

    sites = {"item_calls": {"value": {"sites": {"t.py:9": {"calls": 4, "device": True}}}}}
    assert defer_syncs.not_applicable(sites, {"gpu_count": 1}, {}) is None
    assert "no GPU" in defer_syncs.not_applicable(sites, {"gpu_count": 0}, {})
    cpu = {"item_calls": {"value": {"sites": {"t.py:9": {"calls": 4, "device": False}}}}}
    assert "no .item()" in defer_syncs.not_applicable(cpu, {"gpu_count": 1}, {})


def test_only_the_scripts_own_calls_are_deferred(tmp_path):
    """The caller decides: the script's code gets a deferred number; torch, an installed
    package (a trainer, a metrics library) and advisor itself get the plain one. The runner's
    own .item() wrapper, between the script and the intervention, is looked through."""
    import os

    from advisor.interventions import defer_syncs
    from advisor.runtime.sites import ADVISOR_DIR, SiteFinder

    is_script_code = SiteFinder(str(tmp_path)).is_script_code
    ns = {"_user_caller": defer_syncs._user_caller, "is_script_code": is_script_code}

    def define(src: str, filename: str) -> None:
        exec(compile(src, filename, "exec"), ns)

    define("def wrapper():\n    return _user_caller(is_script_code)\n",
           os.path.join(ADVISOR_DIR, "interventions", "defer_syncs.py"))         # the intervention's .item()
    define("def item():\n    return wrapper()\n", os.path.join(ADVISOR_DIR, "runner", "hooks.py"))  # the runner's
    define("def script():\n    return wrapper()\ndef script_via_runner():\n    return item()\n",
           str(tmp_path / "train.py"))
    define("def trainer():\n    return wrapper()\n", "/opt/venv/lib/python3.12/site-packages/trainer/loop.py")
    define("def controller():\n    return wrapper()\n", os.path.join(ADVISOR_DIR, "runner", "controller.py"))
    assert ns["script"]() is True and ns["script_via_runner"]() is True
    assert ns["trainer"]() is False and ns["controller"]() is False
    assert SiteFinder(str(tmp_path), extra_skip=(os.path.dirname(torch.__file__),)).is_script_code(
        os.path.join(os.path.dirname(torch.__file__), "amp", "grad_scaler.py")) is False


def test_common_consumers_take_it(tmp_path):
    """What training scripts do with a loss value: statistics, numpy, logging, TensorBoard."""
    import logging
    import statistics

    import numpy as np
    from torch.utils.tensorboard import SummaryWriter

    a, _ = item(0.125)
    b, _ = item(0.5)
    i, _ = item(3)
    assert statistics.mean([a, b]) == statistics.mean([0.125, 0.5]) and type(statistics.mean([a, b])) is float
    assert statistics.mean([i, 4]) == 3.5 and statistics.median([a, b, i]) == 0.5
    assert float(np.mean([a, b])) == 0.3125 and np.array([a, b], dtype=float).tolist() == [0.125, 0.5]
    logging.getLogger("t").warning("loss %.4f", a)
    with SummaryWriter(str(tmp_path / "tb")) as w:
        w.add_scalar("loss", b, 1)


def test_kept_values_are_read_once_their_copies_land():
    """losses.append(loss.item()) every step, read at the end: each new value first reads the
    landed older ones (no wait), so buffers and events do not pile up."""
    deferred._pending.clear()
    losses, events = [], []
    for i in range(100):
        d, ev = item(float(i))
        losses.append(d)
        events.append(ev)
        if i >= 2:
            events[i - 2].landed = True   # the GPU runs two steps behind
    assert len(deferred._pending) <= 3
    assert all(d._fn is None for d in losses[:97]) and sum(e.waits for e in events) == 0
    assert sum(losses) == float(sum(range(100)))
