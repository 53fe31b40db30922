"""What the child tells the parent, as part of the Controller (a mixin: it reads the
controller's state): progress.jsonl records as the script goes, notes, and child.json (the
whole result, rewritten at each stage, atomically)."""

from __future__ import annotations

import json
import os
import time
from time import monotonic

from advisor.runner._util import one_line_exception, write_json_atomic
from advisor.runner.losses import read_losses

# At most one "alive" record this often: between steps, the parent's stall clock (runner/parent.py)
# restarts on any record, and a second is far below any stall limit.
ALIVE_S = 1.0


class Reporting:
    last_record = 0.0   # monotonic time of the last progress record (runner/liveness.py reads it)

    def progress(self, stage: str, step: int, **info) -> None:
        if self.forked:
            return
        rec = {"t": round(time.time(), 4), "stage": stage, "step": step, "total": self.total}
        rec.update(info)
        try:
            self._progress.write(json.dumps(rec) + "\n")
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
        if self.forked:
            return
        try:
            os.write(self._progress.fileno(), b'{"t": %.4f, "stage": "alive"}\n' % time.time())
        except Exception:  # closed at the script's end
            pass

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)

    def internal_error(self, where: str, exc: BaseException) -> None:
        self.note(f"advisor internal error in {where}: {one_line_exception(exc)}")

    def _losses(self) -> list:
        refs = self._loss_refs
        read_losses(refs)
        return [float("nan") if v is None else v for v in refs]

    def child_doc(self) -> dict:
        obs = self.observer
        return {
            "stage": self.stage,
            "rank": self.rank, "world_size": self.world_size,
            "steps_seen": self.steps_seen,
            "step_times_ms": [round(x, 4) for x in self.window.step_times_ms],
            "measure_window_ms": None if self.window.window_ms is None else round(self.window.window_ms, 4),
            "step_timing": "window",
            "batches_per_epoch": self.window.batches_per_epoch,
            "settle_steps": self.settled,
            "left_out_steps": dict(self.window.left_out), "left_out_ms": round(self.window.left_out_ms, 4),
            "warmup_step_times_ms": [round(x, 4) for x in self.warmup_step_times_ms],
            "data_wait_ms": [round(x, 4) for x in self.window.data_wait_ms],
            "item_wait_ms": round(self.item_wait_s * 1e3, 4), "item_waits": self.item_waits,
            "losses": self._losses(),
            "batch_size": self.batch_size,
            "batch_size_source": self.batch_size_source,
            "step_counts": self.micro_rows,
            "step_source": self.step_source,
            "trace_files": list(self.trace_files),
            "config": {**(obs.config_doc(self.micro_rows) if obs else dict(self.config)), **fixes_observed()},
            "environment": obs.environment() if obs else {},
            "memory": obs.memory() if obs else {},
            "notes": list(self.notes),
            "interventions_applied": list(self.interventions_applied),
            "exit": dict(self.exit),
            "startup": {k: round(v, 3) for k, v in self.startup.items()},
            "executed_lines": self.lines.doc() if self.lines is not None else {},
            "own_profiler": self.script_profilers.doc() if self.script_profilers is not None else None,
            "flops": self.flops.doc() if self.flops is not None else None,
            "sandbox": self.sandbox.doc() if self.sandbox is not None else None,
        }

    def save(self) -> None:
        if self.forked:
            return
        try:
            doc = self.child_doc()
        except Exception as e:  # never lose the file over one field
            self.internal_error("child.json", e)
            doc = {"stage": self.stage, "steps_seen": self.steps_seen, "notes": self.notes,
                   "exit": self.exit}
        write_json_atomic(os.path.join(self.run_dir, "child.json"), doc)


def fixes_observed() -> dict:
    """Each fix's own observation of the run (Fix.observe), as config ``fix.<name>``."""
    from advisor import fixes

    out = {}
    for fix in fixes.all_fixes():
        seen = fix.observe()
        if seen is not None:
            out[f"fix.{fix.name}"] = {"value": seen, "where": None}
    return out
