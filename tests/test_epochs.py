"""runner.epochs: the epoch count read from the loop around the training loop, in the frames
of a real script, at the moment its loop draws a batch (here a probe iterable in a library
directory stands in for the DataLoader's iterator)."""

from __future__ import annotations

import runpy
import sys
import textwrap

import pytest

from advisor import payback
from advisor.runtime.sites import SiteFinder

PROBE = '''
from advisor.runner import epochs

SEEN = []


class Probe:
    """Yields `n` batches; records what runner.epochs reads at the first one."""

    def __init__(self, sites, n=3):
        self.sites, self.n = sites, n

    def __iter__(self):
        self.i = 0
        return self

    def __next__(self):
        if self.i == 0:
            SEEN.append(epochs.epoch_loop(self.sites))
        if self.i >= self.n:
            raise StopIteration
        self.i += 1
        return self.i
'''


@pytest.fixture
def run(tmp_path, monkeypatch):
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "probe_lib.py").write_text(PROBE)
    monkeypatch.syspath_prepend(str(lib))
    sys.modules.pop("probe_lib", None)
    import probe_lib

    probe_lib.SEEN_SCRIPTS = []

    def go(body: str, *argv: str):
        script = tmp_path / ("train.py" if not probe_lib.SEEN_SCRIPTS else f"train{len(probe_lib.SEEN_SCRIPTS)}.py")
        probe_lib.SEEN_SCRIPTS.append(script)   # a name each: the parsed source is kept per file
        script.write_text("import argparse\nfrom probe_lib import Probe, SITES\n" + textwrap.dedent(body))
        probe_lib.SITES = SiteFinder(str(tmp_path), extra_skip=(str(lib),))
        probe_lib.SEEN.clear()
        monkeypatch.setattr(sys, "argv", [str(script), *argv])
        runpy.run_path(str(script), run_name="__main__")
        return probe_lib.SEEN[0]

    return go


def test_an_epoch_loop_around_the_batch_loop_in_the_same_function(run):
    seen = run("""
        for epoch in range(4):
            for batch in Probe(SITES):
                pass
    """)
    assert seen == {"epochs": 4, "expr": "range(4)", "where": "train.py:4"}


def test_an_epoch_loop_in_a_caller_with_bounds_from_argparse_and_an_attribute(run):
    seen = run("""
        class Trainer:
            def __init__(self, epochs):
                self.epochs = epochs

            def one_epoch(self):
                for i, batch in enumerate(Probe(SITES)):
                    pass

            def fit(self, start=1):
                for epoch in range(start, self.epochs + 1):
                    self.one_epoch()

        p = argparse.ArgumentParser()
        p.add_argument("--epochs", type=int, default=3)
        args = p.parse_args()
        cfg = {"train": {"epochs": args.epochs}}
        Trainer(cfg["train"]["epochs"]).fit()
    """, "--epochs", "7")
    assert seen["epochs"] == 7 and seen["expr"] == "range(start, self.epochs + 1)"
    assert seen["where"] == "train.py:13"


def test_a_progress_bar_around_the_range_keeps_its_length(run):
    seen = run("""
        def tqdm(it, **kw):
            return it

        def trange(n):
            return range(n)

        for epoch in tqdm(range(2, 8), desc="epochs"):
            for batch in Probe(SITES):
                pass
    """)
    assert seen["epochs"] == 6
    assert run("""
        def trange(n):
            return range(n)

        for epoch in trange(5):
            for batch in Probe(SITES):
                pass
    """)["epochs"] == 5


@pytest.mark.parametrize("body", [
    # batches drawn by hand in a step loop: range() counts steps, not epochs
    """
    it = iter(Probe(SITES, n=100))
    for step in range(10):
        batch = next(it)
    """,
    # a bound that only a call gives: advisor calls nothing of the script's
    """
    def epochs():
        return 3

    for epoch in range(epochs()):
        for batch in Probe(SITES):
            pass
    """,
    # no loop around the training loop
    """
    for batch in Probe(SITES):
        pass
    """,
    # a while loop counts nothing advisor can read
    """
    epoch = 0
    while epoch < 3:
        for batch in Probe(SITES):
            pass
        epoch += 1
    """,
], ids=["next-by-hand", "called-bound", "no-epoch-loop", "while"])
def test_shapes_that_give_no_count(run, body):
    assert run(body) is None


def test_a_break_under_a_switch_that_is_off_cannot_end_an_epoch(run):
    """pytorch/examples' ``if args.dry_run: break``: with the flag off the epoch is len(loader)."""
    body = """
        p = argparse.ArgumentParser()
        p.add_argument("--epochs", type=int, default=3)
        p.add_argument("--dry-run", action="store_true")
        args = p.parse_args()
        for epoch in range(1, args.epochs + 1):
            for step, batch in enumerate(Probe(SITES)):
                if step % 10 == 0:
                    if args.dry_run:
                        break
    """
    assert run(body, "--epochs", "4") == {"epochs": 4, "expr": "range(1, args.epochs + 1)", "where": "train.py:8"}


@pytest.mark.parametrize("body", [
    # a batch loop that may end an epoch early
    """
    for epoch in range(3):
        for step, batch in enumerate(Probe(SITES)):
            if step == 1:
                break
    """,
    # the switch is on: the first batch ends the epoch
    """
    dry_run = True
    for epoch in range(3):
        for batch in Probe(SITES):
            if dry_run:
                break
    """,
    # the loop sets the switch itself: it can turn on at any batch
    """
    stop = False
    for epoch in range(3):
        for batch in Probe(SITES):
            stop = batch > 1
            if stop:
                break
    """,
    # examples/slow_loader.py: a step count ends both loops
    """
    step, total = 0, 2
    for epoch in range(3):
        for batch in Probe(SITES):
            step += 1
            if step >= total:
                break
        if step >= total:
            break
    """,
], ids=["break", "switch-on", "switch-set-in-the-loop", "step-count"])
def test_a_break_that_can_run_makes_the_count_the_most_the_run_can_be(run, body):
    """A break can only end the run sooner: len(loader) × the epochs is then its upper bound,
    which still tells a one-off cost the whole count does not pay back (advisor.payback)."""
    line = 3 + [ln.strip() for ln in textwrap.dedent(body).splitlines()].index("for epoch in range(3):")
    assert run(body) == {"epochs": 3, "expr": "range(3)", "where": f"train.py:{line}", "at_most": True}


def test_a_break_in_the_epoch_loop_alone_makes_the_count_the_most_too(run):
    seen = run("""
        done = False
        for epoch in range(4):
            for batch in Probe(SITES):
                pass
            if epoch == 1:
                break
    """)
    assert seen["epochs"] == 4 and seen["at_most"] is True


def test_a_loop_in_a_function_defined_inside_the_epoch_loop_is_not_inside_it(run):
    """A function defined in a loop body runs when it is called: only the caller's loops count."""
    seen = run("""
        for epoch in range(3):
            def one():
                for batch in Probe(SITES):
                    pass
        one()
    """)
    assert seen is None


def test_the_run_length_is_len_loader_times_epochs_in_optimizer_steps():
    child = {"batches_per_epoch": 75, "config": {"epochs": {"value": {"epochs": 4, "expr": "range(4)"},
                                                             "where": "train.py:9"}}}
    assert payback.run_length(child) == {"steps": 300, "source": "len(loader) 75 × 4 epochs (range(4) at train.py:9)"}
    accumulating = {**child, "step_counts": [[3, 3, 3]] * 4}   # three batches an optimizer step
    assert payback.run_length(accumulating)["steps"] == 100
    assert payback.run_length({**child, "batches_per_epoch": None}) is None
    assert payback.run_length(child, run_steps=40) == {"steps": 40, "source": "--run-steps"}
