"""HTML report of a run, and the side-by-side of two runs: one self-contained file each.

Nothing is loaded from the network: the chart library (Chart.js, advisor/report/static/) and the
page script are inlined once, and the Content-Security-Policy allows exactly those two scripts
(by hash) and nothing else. Every string that came from a trace or a script (kernel names, paths,
messages) is untrusted: jinja2 autoescapes the whole template, the chart data travels in a
`<script type="application/json">` block with `<`, `>` and `&` escaped, and the page script
only writes text with textContent or draws on a canvas.
"""

from __future__ import annotations

import base64
import functools
import hashlib
from importlib import resources
from pathlib import Path

import jinja2
import orjson

from advisor.report import view
from advisor.report.charts import bars as _bars, nums as _nums, timeline as _timeline
from advisor.report.ranks import COLUMNS as RANK_COLUMNS, table as rank_table

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("advisor.report", "templates"),
    autoescape=True,
    undefined=jinja2.ChainableUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _fmt(v, nd: int = 2, unit: str = "") -> str:
    v = view.num(v)
    return "–" if v is None else f"{v:,.{nd}f}{unit}"


_ENV.filters.update(
    n=_fmt,
    ms=lambda v, nd=2: _fmt(v, nd, " ms"),
    pct=lambda v, nd=1: _fmt(None if view.num(v) is None else v * 100.0, nd, "%"),
    times=lambda v: _fmt(v, 2, "×"),
    signed_pct=lambda v: "–" if view.num(v) is None else f"{v * 100:+.1f}%",
    gib=lambda v: view.gib(v) or "–",
    status_text=lambda s: view.STATUS_TEXT.get(str(s), str(s)),
)


@functools.cache
def _asset(name: str) -> str:
    return resources.files("advisor.report").joinpath("static", name).read_text(encoding="utf-8")


def safe_json(data) -> str:
    """JSON for a <script type="application/json"> block: no `<`, `>` or `&` can end the block
    or start markup, whatever the strings hold (U+2028/9 escaped too, for old JS parsers)."""
    text = orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                    ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(ch, esc)
    return text


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode() + "'"


def _page(template: str, data: dict, **ctx) -> str:
    scripts = [_asset("chart.umd.min.js"), _asset("report.js")]
    csp = ("default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
           "form-action 'none'; script-src " + " ".join(_sha256(s) for s in scripts))
    return _ENV.get_template(template).render(
        csp=csp, css=_asset("report.css"), chart_js=scripts[0], page_js=scripts[1],
        data_json=safe_json({**data, "phases": view.phases_legend()}), phases=view.phases_legend(), **ctx)


# --- one run ---------------------------------------------------------------------------------

def run_context(doc: dict, run_dir: Path | None) -> tuple[dict, dict]:
    """(template context, chart data) of one run."""
    rows = view.ladder(doc)
    head = view.headline(doc, rows)
    patch = view.patch_view(doc, run_dir)
    best = head["best"]
    timelines = [t for t in (
        _timeline(run_dir, rows[0]["traces"], "baseline"),
        _timeline(run_dir, best["traces"], f"after: {' + '.join(best['stack'] + [best['label']])}") if best else None,
    ) if t]
    analysis = doc.get("analysis") or {}
    ctx = {"doc": doc, "analysis": analysis, "meas": doc.get("measurement") or {}, "env": doc.get("environment") or {},
           "rows": rows, "head": head, "findings": view.findings_view(doc, rows, patch), "patch": patch,
           "env_rows": view.environment_rows(doc.get("environment") or {}),
           "memory": view.memory_view(doc, best), "kernel_rows": view.kernel_rows(analysis),
           "traces": view.traces_view(rows, run_dir), "timelines": timelines, "overhead": rows[0]["overhead"],
           "title": " ".join(str(a) for a in (doc.get("command") or {}).get("argv") or []) or "run",
           "ranks": rank_table(doc), "rank_columns": [c for c, _ in RANK_COLUMNS]}
    data = {"kind": "run", "rows": _bars(rows, scaled=True), "noise": head["noise"], "threshold": head["threshold"],
            "best": best["name"] if best else None, "timelines": timelines,
            "kernel_series": [{"label": "baseline", "shares": _nums(analysis.get("kernel_time_by_class")),
                               "ms": _nums(analysis.get("kernel_time_ms_by_class"))}]
            + ([{"label": "after: " + best["label"], "shares": _nums(best["kernel_time_by_class"])}] if best else [])}
    return ctx, data


def render_html(doc: dict, run_dir: Path | None = None) -> str:
    ctx, data = run_context(doc, Path(run_dir) if run_dir is not None else None)
    return _page("run.html.j2", data, **ctx)


def write_html(doc: dict, path: Path, run_dir: Path | None = None) -> Path:
    path = Path(path)
    path.write_text(render_html(doc, run_dir if run_dir is not None else path.parent), encoding="utf-8")
    return path


# --- two runs --------------------------------------------------------------------------------

def render_compare(doc_a: dict, doc_b: dict, dir_a: Path | None, dir_b: Path | None,
                   names: tuple[str, str] = ("A", "B"), out_dir: Path | None = None) -> str:
    from advisor.report.compare import compare_context
    ctx, data = compare_context(doc_a, doc_b, dir_a, dir_b, names, out_dir)
    return _page("compare.html.j2", data, **ctx)


def write_compare(doc_a: dict, doc_b: dict, dir_a: Path, dir_b: Path, out: Path,
                  names: tuple[str, str] = ("A", "B")) -> Path:
    out = Path(out)
    out.write_text(render_compare(doc_a, doc_b, Path(dir_a), Path(dir_b), names, out.parent), encoding="utf-8")
    return out
