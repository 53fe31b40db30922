"""The per-rank table of a run of several processes (advisor analyze --nproc-per-node N): each
rank's timed step, data wait, profiled phases and communication, for the terminal and the page."""

from __future__ import annotations

COLUMNS = (("step", "step_time_ms"), ("wait", "data_wait_ms"), ("fwd", "forward"), ("bwd", "backward"),
           ("optim", "optimizer"), ("comm", "communication_ms"), ("exposed", "exposed_communication_ms"))


def table(doc: dict) -> list[dict]:
    """One row per rank: {"rank", "device", "cells": [ms or None per COLUMNS], "note"}."""
    out = []
    for r in doc.get("ranks") or []:
        phases = r.get("breakdown_ms") or {}
        cells = [r[key] if key in r else phases.get(key) for _, key in COLUMNS]   # the row's, else a phase
        out.append({"rank": r.get("rank"), "device": r.get("device"), "cells": cells,
                    "note": r.get("missing") or r.get("trace_error")})
    return out
