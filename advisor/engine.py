"""The rule engine: find rules, run them over (trace model, analysis, observed config), rank.

A rule is a module with a docstring (What it does / Why is this bad / Example / Fix /
Fix safety) and the attributes CODE, NAME, SEVERITY, NEEDS, FIX and a function
``check(ctx) -> Finding | list[Finding] | None``; optionally AFTER, the fixes once in which it
fires, or fires first (advisor.trials.guesses starts its fix's trial ahead while one of them runs).
Rules come from three places that all load the same way: the built-in catalogue (the
``advisor_rules`` package, registered as the ``builtin`` entry point), other installed
packages registering the ``advisor.rules`` entry-point group, and directories given with
``--rules DIR``.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import re
import sys
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from types import ModuleType

from advisor.contracts import SEVERITIES, Finding
from advisor.thresholds import Thresholds

DOC_SECTIONS = ("What it does", "Why is this bad", "Example", "Fix", "Fix safety")
# What a rule may declare it needs; the engine skips it with this reason otherwise.
NEEDS_REASONS = {
    "gpu": "the trace has no GPU activity",
    "memory": "the trace has no memory events (profile_memory was off)",
    "config": "no observed configuration (a trace inspected without its run)",
    "steps": "the trace has no complete training step",
    "ranks": "traces of several ranks are needed",
}


@dataclass
class Rule:
    code: str
    name: str
    severity: str
    needs: tuple[str, ...]
    fix: str | None
    doc: str
    check: object
    module: str
    hits: tuple = ()
    non_hits: dict = field(default_factory=dict)
    after: tuple = ()  # fixes once in which it fires (first): its fix is guessed while they run


@dataclass
class RuleContext:
    """Everything a rule may look at. Rules never read files or raw JSON."""

    model: object                     # advisor.trace.TraceModel
    analysis: dict                    # advisor.metrics.analyze(model)
    config: dict                      # observed config {key: {"value", "where"}}; {} when unknown
    environment: dict
    thresholds: Thresholds
    has_config: bool = False
    extra_models: list = field(default_factory=list)   # other ranks' traces
    extra_analyses: list = field(default_factory=list)  # their analyses, when already computed

    def value(self, key: str, default=None):
        item = self.config.get(key)
        return default if item is None else item.get("value", default)

    def where(self, key: str) -> str | None:
        item = self.config.get(key)
        return None if item is None else item.get("where")


def parse_doc_sections(doc: str) -> dict[str, str]:
    """Split a rule docstring into its sections (headers are lines ending in ':' or '##')."""
    sections: dict[str, str] = {}
    current = None
    for line in (doc or "").splitlines():
        m = re.match(r"^\s*(?:#+\s*)?(What it does|Why is this bad|Example|Fix safety|Fix)\s*:?\s*$", line)
        if m:
            current = m.group(1)
            sections[current] = ""
        elif current:
            sections[current] += line + "\n"
    return {k: v.strip() for k, v in sections.items()}


def _rule_from_module(mod: ModuleType) -> Rule | None:
    if not hasattr(mod, "CODE") or not callable(getattr(mod, "check", None)):
        return None
    return Rule(code=mod.CODE, name=mod.NAME, severity=getattr(mod, "SEVERITY", "warning"),
                needs=tuple(getattr(mod, "NEEDS", ())), fix=getattr(mod, "FIX", None),
                doc=(mod.__doc__ or "").strip(), check=mod.check, module=mod.__name__,
                hits=tuple(getattr(mod, "HITS", ())), non_hits=dict(getattr(mod, "NON_HITS", {})),
                after=tuple(getattr(mod, "AFTER", ())))


def _import_builtin_catalogue() -> None:
    """Make ``advisor_rules`` importable from a checkout that was not pip-installed (the
    package maps ``rules/`` to that name only at install time)."""
    try:
        importlib.import_module("advisor_rules")
        return
    except ModuleNotFoundError:
        pass
    init = Path(__file__).resolve().parent.parent / "rules" / "__init__.py"
    spec = importlib.util.spec_from_file_location("advisor_rules", init,
                                                  submodule_search_locations=[str(init.parent)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["advisor_rules"] = mod
    spec.loader.exec_module(mod)


def _rules_in_package(pkg_name: str) -> list[Rule]:
    if pkg_name == "advisor_rules":
        _import_builtin_catalogue()
    pkg = importlib.import_module(pkg_name)
    if not hasattr(pkg, "__path__"):
        rule = _rule_from_module(pkg)
        return [rule] if rule else []
    out = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda i: i.name):
        if info.name.startswith("_"):
            continue
        rule = _rule_from_module(importlib.import_module(f"{pkg_name}.{info.name}"))
        if rule:
            out.append(rule)
    return out


def _rules_in_dir(path: str) -> list[Rule]:
    d = Path(path)
    if not d.is_dir():
        raise FileNotFoundError(f"--rules {path}: not a directory")
    out = []
    for f in sorted(d.glob("*.py")):
        if f.name.startswith("_"):
            continue
        name = f"advisor_user_rules_{abs(hash(str(d.resolve())))}_{f.stem}"
        spec = importlib.util.spec_from_file_location(name, f)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        rule = _rule_from_module(mod)
        if rule:
            out.append(rule)
    return out


def load_rules(extra_dirs: list[str] | tuple = ()) -> list[Rule]:
    """All rules: entry points (the built-in catalogue is one), then --rules directories."""
    packages = {"advisor_rules"}  # present even when running from a checkout without install
    for ep in entry_points(group="advisor.rules"):
        packages.add(ep.value)
    rules: list[Rule] = []
    for pkg in sorted(packages):
        rules.extend(_rules_in_package(pkg))
    for d in extra_dirs:
        rules.extend(_rules_in_dir(d))
    seen: dict[str, str] = {}
    for r in rules:
        if r.code in seen:
            raise ValueError(f"rule code {r.code} is defined twice ({seen[r.code]} and {r.module})")
        seen[r.code] = r.module
        _check_fixes(r)
    return sorted(rules, key=lambda r: r.code)


def _check_fixes(rule: Rule) -> None:
    """A rule's FIX and AFTER name fixes of the registry (advisor.fixes): a name nothing knows
    would never be trialled nor suggested, silently."""
    from advisor import fixes

    for name in (rule.fix, *rule.after):
        if name is not None and not fixes.known(name):
            raise ValueError(f"rule {rule.code} ({rule.module}) names fix {name!r}, which advisor does not "
                             f"know; known: {', '.join(fixes.names('fix', 'suggestion'))}")


def _missing_need(rule: Rule, ctx: RuleContext) -> str | None:
    a = ctx.analysis
    for need in rule.needs:
        if need == "gpu" and not a.get("has_gpu"):
            return NEEDS_REASONS[need]
        if need == "memory" and not (a.get("memory") or {}).get("peak_allocated_bytes"):
            return NEEDS_REASONS[need]
        if need == "config" and not ctx.has_config:
            return NEEDS_REASONS[need]
        if need == "steps" and not a.get("steps_in_trace"):
            return NEEDS_REASONS[need]
        if need == "ranks" and not ctx.extra_models:
            return NEEDS_REASONS[need]
    return None


def _normalize(rule: Rule, raw) -> list[dict]:
    if raw is None:
        return []
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for f in items:
        d = dict(f)
        d.setdefault("code", rule.code)
        d.setdefault("name", rule.name)
        d.setdefault("severity", rule.severity)
        d.setdefault("evidence", [])
        d.setdefault("estimated_gain_ms", None)
        if d.get("fix") is None and rule.fix:
            d["fix"] = {"intervention": rule.fix}
        out.append(d)
    return out


def run_rules(model, analysis: dict, *, config: dict | None = None, environment: dict | None = None,
              extra_dirs: list[str] | tuple = (), thresholds: Thresholds | None = None,
              extra_models: list | None = None, extra_analyses: list | None = None,
              rules: list[Rule] | None = None) -> tuple[list[Finding], list[dict]]:
    """Run every rule; return (findings ranked by estimated gain, skipped rules with reasons)."""
    ctx = RuleContext(model=model, analysis=analysis, config=config or {}, environment=environment or {},
                      thresholds=thresholds or Thresholds(), has_config=bool(config),
                      extra_models=extra_models or [], extra_analyses=extra_analyses or [])
    findings: list[dict] = []
    skipped: list[dict] = []
    for rule in rules if rules is not None else load_rules(extra_dirs):
        reason = _missing_need(rule, ctx)
        if reason:
            skipped.append({"code": rule.code, "name": rule.name, "reason": reason})
            continue
        findings.extend(_normalize(rule, rule.check(ctx)))
    rank = {s: i for i, s in enumerate(reversed(SEVERITIES))}
    findings.sort(key=lambda f: (-(f.get("estimated_gain_ms") or 0.0), rank.get(f["severity"], 9), f["code"]))
    return findings, skipped
