"""Write docs/rules.md, the rule catalogue, from the rules' own docstrings.

The catalogue is loaded the way `advisor rules` and `advisor rule CODE` load it
(advisor.engine.load_rules), and only the built-in rules (the ``advisor_rules`` package, i.e.
``rules/``) are written: rules from other installed packages or --rules directories are not
part of this repository's documentation. Each rule gets one section: its code and name, its
severity, what it needs, the fix it names, and the docstring's sections (What it does / Why is
this bad / Example / Fix / Fix safety).

    python3 benchmarks/rules_doc.py                # writes docs/rules.md
    python3 benchmarks/rules_doc.py --check        # exit 1 when docs/rules.md is out of date
    python3 benchmarks/rules_doc.py --out FILE     # write elsewhere ("-": stdout)
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from advisor import fixes  # noqa: E402
from advisor.engine import DOC_SECTIONS, NEEDS_REASONS, load_rules  # noqa: E402

OUT = REPO / "docs" / "rules.md"
HEADER = re.compile(r"^(?:#+\s*)?(What it does|Why is this bad|Example|Fix safety|Fix)\s*:?\s*$")
# A line of a Fix section that reads as code: a statement, an assignment or a call.
CODE_LINE = re.compile(r"^(with |for |if |def |class |return |import |from |torchrun\b|#|"
                       r"[A-Za-z_][\w.]*(\[[^\]]*\])?\s*(\+?=|\())")
NEEDS = {"gpu": "a GPU in the trace", "memory": "the peak GPU memory (the run's, or a trace's memory events)",
         "config": "the observed configuration (a run, not a bare trace)",
         "steps": "complete training steps in the trace", "ranks": "traces of several ranks"}


def sections(doc: str) -> tuple[str, dict[str, str]]:
    """The docstring's summary line and its sections, each dedented (not stripped of its
    indentation as engine.parse_doc_sections does: code keeps its block structure)."""
    lines = inspect.cleandoc(doc).splitlines()
    summary, out, current = [], {}, None
    for line in lines:
        m = HEADER.match(line)
        if m:
            current = m.group(1)
            out[current] = []
        elif current:
            out[current].append(line)
        else:
            summary.append(line)
    return " ".join(s.strip() for s in summary if s.strip()), \
        {k: textwrap.dedent("\n".join(v)).strip("\n") for k, v in out.items()}


def inline(text: str) -> str:
    """reST literals (``x``) as Markdown code spans; a bare '*' escaped outside them."""
    parts = re.split(r"(``.+?``)", text)
    return "".join(f"`{p[2:-2]}`" if p.startswith("``") else p.replace("*", r"\*") for p in parts)


def prose(text: str) -> str:
    paras = [" ".join(line.strip() for line in p.splitlines()) for p in re.split(r"\n\s*\n", text) if p.strip()]
    return "\n\n".join(inline(p) for p in paras)


def code(lines: list[str]) -> str:
    body = textwrap.dedent("\n".join(lines)).replace("``", "")
    return f"```python\n{body}\n```"


def fix_section(text: str) -> str:
    """Prose and code as they alternate: a line is code when it reads as code (or is indented
    under code), unless it continues a prose sentence (the line before it is prose that does
    not end with ':')."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        prev = blocks[-1] if blocks else None
        if not line.strip():
            blocks.append(("blank", []))
            continue
        indented = line[:1].isspace()
        continues = prev is not None and prev[0] == "prose" and not prev[1][-1].rstrip().endswith(":")
        is_code = not continues and (CODE_LINE.match(line.strip()) or (indented and prev and prev[0] == "code"))
        kind = "code" if is_code else "prose"
        if prev is not None and prev[0] == kind:
            prev[1].append(line)
        else:
            blocks.append((kind, [line]))
    out = [prose("\n".join(ls)) if kind == "prose" else code(ls) for kind, ls in blocks if kind != "blank"]
    return "\n\n".join(out)


def fix_kind(fix: str | None) -> str:
    """The fix a rule names, and what advisor does with it."""
    if not fix:
        return "no fix named: the remedy depends on the cause"
    if fixes.trait(fix, "kind", "suggestion") == "suggestion":
        return f"fix `{fix}`, suggested only (advisor cannot apply it at run time)"
    if fixes.trait(fix, "apart"):
        return f"fix `{fix}`, measured apart from the ladder and never put in the patch"
    return f"fix `{fix}`, trialled on the script"


def rule_section(rule) -> str:
    summary, secs = sections(rule.doc)
    meta = [f"severity **{rule.severity}**", fix_kind(rule.fix)]
    if rule.needs:
        meta.append("needs " + ", ".join(NEEDS.get(n, NEEDS_REASONS.get(n, n)) for n in rule.needs))
    if rule.after:
        meta.append("may fire first once " + " or ".join(f"`{a}`" for a in rule.after)
                    + " is kept, so its fix is started ahead while that trial runs")
    out = [f"## {rule.code} {rule.name}", "", inline(summary), "", "; ".join(meta) + ".", ""]
    for name in DOC_SECTIONS:
        text = secs.get(name)
        if not text:
            continue
        out.append(f"**{name}**")
        out.append("")
        if name == "Example":
            out.append(code(text.splitlines()))
        elif name == "Fix":
            out.append(fix_section(text))
        else:
            out.append(prose(text))
        out.append("")
    return "\n".join(out)


def render() -> str:
    rules = [r for r in load_rules() if r.module.split(".")[0] == "advisor_rules"]
    head = [
        "# The rule catalogue",
        "",
        "<!-- Generated by benchmarks/rules_doc.py from the rules' docstrings: do not edit by hand. -->",
        "",
        "This page is generated from the docstrings of the rules in [`rules/`](../rules/). To regenerate",
        "it after changing a rule, run `python3 benchmarks/rules_doc.py` from the repository root",
        "(`--check` exits 1 when this page is out of date).",
        "`advisor rules` lists the same catalogue in the terminal, and `advisor rule CODE` prints one rule.",
        "",
        "Each rule reads only the parsed trace and the observed configuration, and names the fix that",
        "the trials apply at run time (or a fix that is only suggested). Thresholds, with the reason",
        "each was chosen, are in [`advisor/thresholds.py`](../advisor/thresholds.py), and what was",
        "measured when they were set in [measurement.md](measurement.md#what-was-measured-when-these-choices-were-made);",
        "override one with `--threshold NAME=VALUE` or `ADVISOR_THRESHOLDS=\"NAME=VALUE,...\"`. Your own rules: a",
        "directory of rule files (`--rules DIR`), or a package registering the `advisor.rules`",
        "entry-point group; a rule module defines `CODE`, `NAME`, `SEVERITY`, `NEEDS`, `FIX` and",
        "`check(ctx)`, and has the docstring sections below ([internals](internals.md), §5).",
        "",
        "| code | name | severity | fix | the fix is |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in rules:
        anchor = f"{r.code}-{r.name}".lower()
        kind = fixes.trait(r.fix, "kind", "suggestion")
        how = "–" if not r.fix else "suggested" if kind == "suggestion" else \
            "measured apart" if fixes.trait(r.fix, "apart") else "trialled"
        head.append(f"| [{r.code}](#{anchor}) | {r.name} | {r.severity} | {f'`{r.fix}`' if r.fix else '–'} | {how} |")
    body = [rule_section(r) for r in rules]
    return "\n".join(head) + "\n\n" + "\n".join(body).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(OUT), help="file to write (default docs/rules.md; '-' for stdout)")
    p.add_argument("--check", action="store_true", help="exit 1 when the file differs from what would be written")
    ns = p.parse_args(argv)
    text = render()
    if ns.out == "-":
        sys.stdout.write(text)
        return 0
    out = Path(ns.out)
    if ns.check:
        same = out.is_file() and out.read_text(encoding="utf-8") == text
        print(f"{out}: {'up to date' if same else 'out of date: run python3 benchmarks/rules_doc.py'}")
        return 0 if same else 1
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"wrote {out} ({len(text.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
