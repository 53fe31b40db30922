"""The script's output of a process after the baseline (specs.quiet), parent side: the file its
stdout and stderr go to, and the last lines of it, which a failed run's reasons carry (the user
no longer sees that output scroll by)."""

from __future__ import annotations

import os

TAIL_LINES = 3       # a traceback's last frame, its source line and the exception
TAIL_LINE_CHARS = 200
_READ_BYTES = 16384  # enough for the last lines; a long log is not read whole


def output_path(spec: dict | None, run_dir: str | None = None) -> str | None:
    """Where the process of this spec writes its output, None for the terminal; ``run_dir``: its
    directory, where that is not (yet) spec["run_dir"] (a process started on a guess)."""
    name = (spec or {}).get("output_file")
    return os.path.join(run_dir or spec["run_dir"], name) if name else None


def open_output(path: str | None) -> int | None:
    """The output file, opened for appending (the child opens it again, as do the ranks: their
    lines interleave, none overwrites another's); None where it cannot be opened: then the
    output reaches the terminal, as it did before."""
    if path is None:
        return None
    try:
        return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:
        return None


def tail(path: str, lines: int = TAIL_LINES) -> list[str]:
    """The file's last non-blank lines, each cut to TAIL_LINE_CHARS; [] when there is none."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - _READ_BYTES))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    kept = [line.strip() for line in text.replace("\r", "\n").splitlines() if line.strip()][-lines:]
    return [line if len(line) <= TAIL_LINE_CHARS else line[:TAIL_LINE_CHARS - 1] + "…" for line in kept]


def tail_reason(spec: dict) -> list[str]:
    """A failed run's last words as one reason (reasons are one line each: its lines joined by
    " | "), naming the file that holds the rest; [] when it wrote nothing or to the terminal."""
    path = output_path(spec)
    last = tail(path) if path else []
    if not last:
        return []
    root = spec.get("sandbox_root")
    shown = os.path.relpath(path, root) if root else path
    return [f"its output ({shown}) ends: {' | '.join(last)}"]
