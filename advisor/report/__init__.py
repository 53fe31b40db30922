"""Renderers over saved runs. A run is what `advisor analyze` left in its directory (run.json
and the traces it names); every renderer takes saved runs and returns text: the HTML page of
one run, the terminal summary, the before/after page of two. The command line and the Python
API render through them; nothing here runs a script or touches a trace it was not given.

    from advisor.report import SavedRun, render
    run = SavedRun.load("reports/my-run")
    html = render("html", run)
    text = render("terminal", run)
    page = render("compare", SavedRun.load("reports/a"), SavedRun.load("reports/b"))
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SavedRun:
    doc: dict
    run_dir: Path

    @classmethod
    def load(cls, path) -> SavedRun:
        """A run directory, or its run.json; OSError/ValueError with a one-line reason."""
        from advisor import rundir

        found = rundir.find_run_json(path)
        return cls(rundir.read_run(found), found.parent)


def _html(run: SavedRun) -> str:
    from advisor.report.html import render_html

    return render_html(run.doc, run.run_dir)


def _terminal(run: SavedRun, width: int = 80) -> str:
    from rich.console import Console

    from advisor.report.terminal import print_summary

    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False)
    print_summary(run.doc, console)
    return console.file.getvalue()


def _compare(a: SavedRun, b: SavedRun, names: tuple[str, str] = ("A", "B"), out_dir: Path | None = None) -> str:
    from advisor.report.html import render_compare

    return render_compare(a.doc, b.doc, a.run_dir, b.run_dir, names, out_dir)


RENDERERS: dict[str, Callable[..., str]] = {"html": _html, "terminal": _terminal, "compare": _compare}


def render(kind: str, *runs: SavedRun, **options) -> str:
    """The text of renderer `kind` over `runs` (one, or two for "compare")."""
    if kind not in RENDERERS:
        raise ValueError(f"no renderer {kind!r}; known: {', '.join(RENDERERS)}")
    return RENDERERS[kind](*runs, **options)


def write_html(run_dir: Path, doc: dict) -> Path:
    """The run's index.html, from its document as it stands."""
    path = Path(run_dir) / "index.html"
    path.write_text(render("html", SavedRun(doc, Path(run_dir))), encoding="utf-8")
    return path
