"""HTML report of a run: one self-contained file, nothing loaded from the network.

Every string that came from a trace or a script (kernel names, paths, messages) is
untrusted: jinja2's autoescape is on for the whole template.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from advisor.report.terminal import PHASE_LABELS

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("advisor.report", "templates"),
    autoescape=True,
    undefined=jinja2.ChainableUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def render_html(doc: dict) -> str:
    analysis = doc.get("analysis") or {}
    total = analysis.get("step_time_ms") or 0.0
    phases = [
        {"key": k, "label": PHASE_LABELS.get(k, k), "ms": float(v),
         "pct": (float(v) / total * 100.0) if total else 0.0}
        for k, v in (analysis.get("breakdown") or {}).items()
    ]
    kernel_classes = sorted(((k, float(v)) for k, v in (analysis.get("kernel_time_by_class") or {}).items() if v),
                            key=lambda kv: -kv[1])
    run_dir = Path(doc.get("run_dir") or ".")
    return _ENV.get_template("run.html.j2").render(
        doc=doc, analysis=analysis, phases=phases, kernel_classes=kernel_classes,
        meas=doc.get("measurement") or {}, env=doc.get("environment") or {},
        tb_command=f"tensorboard --logdir {run_dir / 'tb'}",
    )


def write_html(doc: dict, path: Path) -> Path:
    path.write_text(render_html(doc), encoding="utf-8")
    return path
