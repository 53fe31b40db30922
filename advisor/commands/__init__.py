"""The command line's commands, one module each (advisor.cli parses and dispatches): analyze,
compare (and its CI gate), inspect/report/rules/rule. What they share: the console advisor
speaks on (stderr: stdout is the script's, or `--json`'s) and the one-line failure."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

err = Console(stderr=True, highlight=False)
EXIT_GATE_FAILED = 3  # compare --fail-below: the new run is slower than the gate allows


def say(text: str) -> None:
    """One line of advisor's progress on the console (the script's own output shares it); the
    text is plain (a path's brackets are printed, never read as markup)."""
    err.print(f"[cyan]advisor ▸[/] {escape(text)}", markup=True, highlight=False)


def fail(msg: str, code: int = 1) -> int:
    """One line on stderr, plain text (paths and messages are never read as markup); the exit code."""
    err.print(f"[bold red]advisor:[/] {escape(msg)}", markup=True, highlight=False, soft_wrap=True)
    return code
