"""The fix registry (advisor/fixes): every fix implements every facet its kind needs, its
traits name fixes that exist, no table elsewhere lists fixes by name, and a fix added in one
module (gc-freeze) is trialled, written into fixes.patch and checked like the others."""

from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from advisor import fixes
from advisor.fixes.base import NOT_CHECKED, Fix

REPO = Path(__file__).resolve().parent.parent
TINY = REPO / "tests" / "fixtures" / "scripts" / "tiny_train.py"
ENV = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
KINDS = {"fix", "test", "bound", "reference", "suggestion"}
ALL = fixes.all_fixes()


def _overrides(fix: Fix, facet: str) -> bool:
    return getattr(type(fix), facet) is not getattr(Fix, facet)


@pytest.mark.parametrize("fix", ALL, ids=[f.name for f in ALL])
def test_every_fix_implements_every_facet_of_its_kind(fix):
    assert fix.kind in KINDS and re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", fix.name)
    if fix.kind == "suggestion":
        assert fix.candidates({}, {}) == [] and fix.not_applicable({}, {}, {})
        return
    # run time: a module of advisor.interventions, or the fix's own apply
    if fix.runtime is None:
        assert all(_overrides(fix, f) for f in ("apply", "describe", "not_applicable")), fix.name
    else:
        mod = fix.module()
        assert all(callable(getattr(mod, f, None)) for f in ("apply", "describe", "not_applicable")), fix.name
        assert not hasattr(mod, "CHANGES_NUMERICS"), "what a fix changes is said once, on its class"
    assert isinstance(fix.describe({}), str)
    plans = fix.candidates({}, {"gpu_count": 1, "cpu_count": 8})
    assert plans and all(isinstance(p.get("params"), dict) for p in plans)
    if fix.kind == "fix":
        # a fix that is kept is written into fixes.patch and checked in the patched run
        assert fix.editor or _overrides(fix, "edit"), f"{fix.name}: no source edit"
        if fix.editor:
            module, _, function = fix.editor.partition(":")
            assert callable(getattr(importlib.import_module(module), function, None)), fix.editor
        assert _overrides(fix, "check"), f"{fix.name}: no verification check (it would read 'not checked')"
        assert fix.check({}, {}, {}) != NOT_CHECKED


@pytest.mark.parametrize("fix", ALL, ids=[f.name for f in ALL])
def test_traits_name_fixes_that_exist(fix):
    for other in (fix.partner, *fix.supersedes):
        if other is not None:
            assert fixes.known(other), (fix.name, other)
    assert fix.where_key is None or isinstance(fix.where_key, str)


def test_no_table_elsewhere_lists_fixes_by_name():
    """A dict, set or tuple literal of two or more fix names outside advisor/fixes is a table
    the registry should hold."""
    names = "|".join(re.escape(n) for n in fixes.names("fix", "test", "bound", "reference"))
    item = rf'"(?:{names})"'
    table = re.compile(rf"[{{(\[]\s*{item}\s*[:,]\s*(?:[^\n]*?){item}")
    hits = []
    for path in (REPO / "advisor").rglob("*.py"):
        if "fixes" in path.relative_to(REPO / "advisor").parts:
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if table.search(line):
                hits.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert not hits, "\n".join(hits)


def test_rules_name_only_known_fixes(tmp_path):
    from advisor.engine import load_rules

    (tmp_path / "adv900_typo.py").write_text('"""What it does:\\nx\\nWhy is this bad:\\nx\\nExample:\\nx\\nFix:\\nx\\n'
                                             'Fix safety:\\nx\\n"""\nCODE = "ADV900"\nNAME = "typo"\nFIX = "warp-drive"\n'
                                             'def check(ctx):\n    return None\n')
    with pytest.raises(ValueError, match="names fix 'warp-drive'"):
        load_rules([str(tmp_path)])


def _analyze(tmp_path: Path, *args) -> tuple[subprocess.CompletedProcess, dict]:
    r = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--out", str(tmp_path / "run"), "--warmup", "2",
                        "--steps", "6", "--min-time", "0", "--profile-steps", "1", *args, str(TINY)],
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r, json.loads((tmp_path / "run" / "run.json").read_text())


def test_a_fix_added_in_one_module_is_trialled(tmp_path):
    _, doc = _analyze(tmp_path, "--fix", "gc-freeze")
    trial = next(t for t in doc["trials"] if t["fix"] != "baseline (repeat)")   # a busy host may re-time the reference
    assert trial["fix"] == "gc-freeze" and trial["status"] in ("accepted", "rejected", "unsure"), trial
    child = json.loads((tmp_path / "run" / "trials" / trial["name"] / "child.json").read_text())
    assert child["config"]["fix.gc-freeze"]["value"]["frozen"] > 0   # applied at run time


def test_a_fix_added_in_one_module_is_patched_and_checked(tmp_path):
    _, doc = _analyze(tmp_path, "--apply", "gc-freeze", "--no-trials")
    patch = (tmp_path / "run" / "fixes.patch").read_text()
    assert "+import gc" in patch and "gc.freeze()" in patch
    v = doc["patch"]["verification"]
    assert [(c["fix"], c["took_effect"]) for c in v["checks"]] == [("gc-freeze", True)], v
