"""One object per fix: the rule's proposal, the trial, the patch edit and the check.

Each module of this package holds one fix (or a few small ones, suggestions.py): a subclass of
``advisor.fixes.base.Fix`` naming it, saying what it changes and how the trial ladder treats
it, which trials a finding becomes, how a trial applies it at run time (its module in
advisor.interventions), the edit fixes.patch makes for it and the check the patch's
verification runs. The registry is discovered from the package: nothing elsewhere lists
fixes by name. Adding a fix is one module here (+ its tests, + a rule if one proposes it);
docs/internals.md shows the recipe.

Importing this package imports no torch: a fix's runtime module is imported in the child.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
import sys

from advisor.contracts import PatchNote
from advisor.fixes.base import Fix, FixSpec

__all__ = ["Fix", "FixSpec", "all_fixes", "apply_all", "get", "known", "make_patch", "names", "parse_specs", "trait",
           "with_trait"]


@functools.cache
def _registry() -> dict[str, Fix]:
    out: dict[str, Fix] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name == "base" or info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, Fix) and obj.__module__ == mod.__name__ \
                    and getattr(obj, "name", None) and not obj.__name__.startswith("_"):
                if obj.name in out:
                    raise RuntimeError(f"two fixes named {obj.name!r}: {type(out[obj.name]).__name__}, {obj.__name__}")
                out[obj.name] = obj()
    return out


def all_fixes() -> list[Fix]:
    return list(_registry().values())


def known(name) -> bool:
    return name in _registry()


def get(name: str) -> Fix:
    try:
        return _registry()[name]
    except KeyError:
        raise KeyError(f"no fix named {name!r}; known: {', '.join(names())}") from None


def names(*kinds: str) -> list[str]:
    """Sorted names of the fixes of these kinds (default: every fix advisor can apply at run
    time: fixes, the numerics check's test, bounds and references; not suggestions)."""
    kinds = kinds or ("fix", "test", "bound", "reference")
    return sorted(f.name for f in all_fixes() if f.kind in kinds)


def trait(name, attr: str, default=False):
    """A fix's trait by its name; ``default`` for a name no fix has (a bundle's joined name)."""
    return getattr(get(name), attr) if known(name) else default


def with_trait(trait: str) -> set[str]:
    """Names of the fixes whose class sets ``trait`` (bundled, last, fresh, ...)."""
    return {f.name for f in all_fixes() if getattr(f, trait)}


def parse_specs(text: str) -> list[dict]:
    """``--apply`` syntax → [{"name", "params"}]: ``NAME[:KEY=VALUE...]``, comma-separated,
    e.g. ``amp:dtype=float16,channels-last,dataloader-workers:num_workers=8:pin_memory=true``.
    Raises ValueError with a one-line reason."""
    out = []
    for item in filter(None, (t.strip() for t in text.split(","))):
        name, *pairs = item.split(":")
        if name not in names():
            raise ValueError(f"no fix named {name!r}; known: {', '.join(names())}")
        params = {}
        for pair in pairs:
            key, eq, value = pair.partition("=")
            if not eq or not key:
                raise ValueError(f"{item!r}: parameters are KEY=VALUE, got {pair!r}")
            params[key] = _value(value)
        out.append({"name": name, "params": params})
    return out


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def apply_all(specs: list[dict]) -> list[str]:
    """Apply each {"name", "params"} in this process (a trial's child: imports torch), in order;
    returns one description line per fix."""
    lines = []
    for item in specs:
        fix = get(item["name"])
        params = dict(item.get("params") or {})
        params.setdefault("_name", item["name"])
        fix.apply(params)
        lines.append(fix.describe(params))
    return lines


def make_patch(script_path: str, specs: list[dict], config: dict, root: str | None = None,
               **kw) -> tuple[str, list[PatchNote]]:
    """fixes.patch for these fixes ({"intervention", "params"}): each fix's own edit, placed by
    advisor.patch (its docstring says how; the keywords are its make_patch's)."""
    from advisor import patch
    from advisor.patch import supersede

    # no hunk of a fix that another placed fix supersedes (Fix.supersedes)
    return supersede.make_patch(patch.make_patch, script_path, specs, config, root, registry=sys.modules[__name__], **kw)
