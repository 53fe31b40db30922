"""Python's garbage collections in the timed window (advisor.runner.gctime) and what the rules
read of them (ADV120, gc-pauses)."""

from __future__ import annotations

import gc
import threading

from advisor.results import merge_child_results
from advisor.runner.gctime import GcClock


def test_the_clock_counts_the_training_threads_collections_while_on():
    clock = GcClock()
    gc.disable()   # only the collections asked for here
    try:
        clock.start()
        for _ in range(3):
            gc.collect(0)
        gc.collect()
        other = threading.Thread(target=gc.collect)   # a loader thread's collection is not the step's
        other.start()
        other.join()
        clock.stop()
        gc.collect()   # after the window: not counted
    finally:
        gc.enable()
    doc = clock.doc()
    assert doc["collections"] == [3, 0, 1]
    assert doc["ms"] > 0 and doc["longest_ms"] <= doc["ms"]
    clock.start()   # a new window starts from nothing
    clock.stop()
    assert clock.doc()["collections"] == [0, 0, 0] and clock.doc()["ms"] == 0


def test_the_window_s_collections_join_what_the_rules_read():
    analysis: dict = {}
    child = {"step_times_ms": [10.0] * 4, "measure_window_ms": 40.0, "data_wait_ms": [0.0] * 4,
             "gc": {"ms": 2.0, "collections": [5, 1, 1], "longest_ms": 1.5}}
    merge_child_results(analysis, child)
    m = analysis["measured"]
    assert m["gc_ms_per_step"] == 0.5 and m["gc_frac"] == 0.05 and m["gc_collections"] == [5, 1, 1]
    assert m["gc_longest_ms"] == 1.5
