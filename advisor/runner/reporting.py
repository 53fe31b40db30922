"""What the child tells the parent: progress.jsonl records as the script goes (ProgressLog), the
run's notes (Notes), and child.json (the whole result, rewritten at each stage, atomically),
made from the Controller's parts by child_doc."""

from __future__ import annotations

import json
import os
import sys
import time
from time import monotonic

from advisor.runner._util import one_line_exception, write_json_atomic

# At most one "alive" record this often: between steps, the parent's stall clock (runner/parent.py)
# restarts on any record, and a second is far below any stall limit.
ALIVE_S = 1.0


class ProgressLog:
    """progress.jsonl, open for the whole run: the directory may be renamed under it (a process
    started ahead takes its trial's name: runner/held.py), and the file stays valid."""

    def __init__(self, run_dir: str):
        self._file = open(os.path.join(run_dir, "progress.jsonl"), "a", buffering=1, encoding="utf-8")
        self.last_record = 0.0   # monotonic time of the last record (runner/liveness.py reads it)
        self._forked = False

    def after_fork(self) -> None:
        """A forked process (a DataLoader worker) writes nothing: the file is the run's."""
        self._forked = True

    def record(self, stage: str, step: int, total: int, **info) -> None:
        if self._forked:
            return
        rec = {"t": round(time.time(), 4), "stage": stage, "step": step, "total": total}
        rec.update(info)
        try:
            self._file.write(json.dumps(rec) + "\n")
        except Exception:
            pass
        self.last_record = monotonic()

    def alive(self) -> None:
        """A sign of work between step records (a module forward, a DataLoader batch, a backward,
        a torch.save; runner/liveness.py): an {"stage": "alive"} record for the parent's stall
        clock, at most one every ALIVE_S. On the hooks' hot path: one monotonic read and a
        comparison. Any thread may call it: the line goes out in one os.write on the append-mode
        file, whose own records are whole lines too (line-buffered)."""
        t = monotonic()
        if t - self.last_record < ALIVE_S:
            return
        self.last_record = t
        if self._forked:
            return
        try:
            os.write(self._file.fileno(), b'{"t": %.4f, "stage": "alive"}\n' % time.time())
        except Exception:  # closed at the script's end
            pass

    def close(self) -> None:
        try:
            self._file.close()
        except Exception:
            pass


class Notes:
    """What the run says in words (child.json "notes"): each once, in the order first said."""

    def __init__(self):
        self.lines: list[str] = []

    def add(self, text: str) -> None:
        if text not in self.lines:
            self.lines.append(text)

    def internal_error(self, where: str, exc: BaseException) -> None:
        self.add(f"advisor internal error in {where}: {one_line_exception(exc)}")


def child_doc(ctl) -> dict:
    """child.json's content, from the Controller's parts (docs/internals.md §1)."""
    obs, window, seen, clock = ctl.observer, ctl.window, ctl.seen, ctl.clock
    return {
        "stage": ctl.outcome.stage,
        "refused": ctl.outcome.refused,
        "rank": ctl.run.rank, "world_size": ctl.run.world_size,
        "steps_seen": clock.steps_seen,
        "step_times_ms": [round(x, 4) for x in window.step_times_ms],
        "measure_window_ms": None if window.window_ms is None else round(window.window_ms, 4),
        "step_timing": "window",
        "window_closed_by": window.closed_by,
        "batches_per_epoch": window.batches_per_epoch,
        "settle_steps": clock.settled,
        "left_out_steps": dict(window.left_out), "left_out_ms": round(window.left_out_ms, 4),
        **ctl.startup.steps_doc(),   # warmup_step_times_ms, and when each ended
        "data_wait_ms": [round(x, 4) for x in window.data_wait_ms],
        "tokens": window.tokens if any(t is not None for t in window.tokens) else None,
        "gc": window.gc.doc() if window.window_ms is not None else None,
        "item_wait_ms": round(seen.item_wait_s * 1e3, 4), "item_waits": seen.item_waits,
        "losses": ctl.losses.values(),
        "batch_size": seen.batch_size,
        "batch_size_source": seen.batch_size_source,
        "step_counts": seen.micro_rows,
        "step_source": clock.step_source,
        "trace_files": list(ctl.profiling.trace_files),
        "config": {**(obs.config_doc(seen.micro_rows) if obs else {}), **fixes_observed()},
        "environment": obs.environment() if obs else {},
        "memory": obs.memory() if obs else {},
        "notes": list(ctl.notes.lines),
        "interventions_applied": list(ctl.interventions_applied),
        "exit": dict(ctl.outcome.exit),
        "startup": ctl.startup.doc(),
        "compile_s": _compile_seconds(),
        "compile_cache": _compile_cache_use(),
        "samples_cache": _samples_cache(),
        "executed_lines": ctl.lines.doc() if ctl.lines is not None else {},
        "own_profiler": ctl.script_profilers.doc() if ctl.script_profilers is not None else None,
        "flops": ctl.flops.doc() if ctl.flops is not None else None,
        "window_compiles": ctl.oneoffs.window_graphs if ctl.oneoffs is not None else None,
        "graph_breaks": _graph_breaks(),
        "sandbox": ctl.sandbox.doc() if ctl.sandbox is not None else None,
    }


def _compile_seconds() -> float | None:
    from advisor.runner.oneoffs import compile_seconds  # torch: the child's, imported there already

    return compile_seconds()


def _compile_cache_use() -> dict | None:
    from advisor.runner.oneoffs import compile_cache_use

    return compile_cache_use()


def _samples_cache() -> list:
    """What the run's samples cache saved or loaded in this process (interventions.samples_cache),
    when a fix used it."""
    mod = sys.modules.get("advisor.interventions.samples_cache")
    return mod.events() if mod is not None else []


def _graph_breaks() -> list:
    from advisor.runner.oneoffs import graph_breaks

    return graph_breaks()


def save_child_doc(ctl) -> None:
    """child.json, rewritten whole (atomically); a field that fails leaves a note, not no file."""
    try:
        doc = child_doc(ctl)
    except Exception as e:  # never lose the file over one field
        ctl.internal_error("child.json", e)
        doc = {"stage": ctl.outcome.stage, "steps_seen": ctl.clock.steps_seen, "notes": ctl.notes.lines,
               "exit": ctl.outcome.exit}
    write_json_atomic(os.path.join(ctl.run.dir, "child.json"), doc)


def fixes_observed() -> dict:
    """Each fix's own observation of the run (Fix.observe), as config ``fix.<name>``."""
    from advisor import fixes

    out = {}
    for fix in fixes.all_fixes():
        seen = fix.observe()
        if seen is not None:
            out[f"fix.{fix.name}"] = {"value": seen, "where": None}
    return out
