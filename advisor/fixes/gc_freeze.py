"""``gc-freeze``: the objects made during set-up frozen out of Python's garbage collector.

Python's cyclic collector walks every tracked object at each full collection; once a training
script has built its model, optimizer and dataset, those objects stay alive for the whole run,
and a collection that walks them again pauses the step. ``gc.freeze()`` after set-up moves them
to a permanent generation the collector skips, and a higher generation-0 threshold makes
collections rarer. No numerics change.

The whole fix lives here: the trial's run-time part, the edit, and the check.
"""

from __future__ import annotations

import gc

from advisor.fixes.base import Fix, value

GEN0_THRESHOLD = 50_000   # allocations between generation-0 collections (Python's default: 700)


class GcFreeze(Fix):
    name = "gc-freeze"
    same_graphs = True   # Python's collector, not the model
    bundled = True   # small and safe: a few % at most alone

    def describe(self, params):
        return f"gc.freeze() after set-up, generation-0 threshold {GEN0_THRESHOLD:,}"

    def not_applicable(self, config, environment, params):
        frozen = value(config, "fix.gc-freeze")
        if frozen.get("frozen"):
            return "the script freezes its objects out of the garbage collector already"
        return None

    def apply(self, params):
        """At the first optimizer step, set-up is done: collect once, then freeze."""
        from torch.optim.optimizer import register_optimizer_step_post_hook

        done = []

        def freeze(*_):   # stays registered (removing a hook while hooks run breaks their loop)
            if not done:
                done.append(True)
                gc.collect()
                gc.freeze()
                gc.set_threshold(GEN0_THRESHOLD, *gc.get_threshold()[1:])

        register_optimizer_step_post_hook(freeze)

    def observe(self) -> dict | None:
        """Objects frozen out of the collector, when the run froze any (config ``fix.gc-freeze``)."""
        frozen = gc.get_freeze_count()
        return {"frozen": frozen, "gen0_threshold": gc.get_threshold()[0]} if frozen else None

    def edit(self, ctx, fix, params):
        """After the optimizer is made (the model and data are by then): collect, freeze, and
        raise generation 0's threshold."""
        from advisor.patch.core import PRIO_IMPORT, applied, location

        f, line = ctx.site("optimizer", fix)
        stmt = f.stmt_at(line)
        if "import gc" not in f.text:
            ctx.after_imports(f, "import gc", PRIO_IMPORT)
        code = f"gc.collect(); gc.freeze(); gc.set_threshold({GEN0_THRESHOLD}, *gc.get_threshold()[1:])"
        ctx.insert(f, stmt, code, after=True, prio=0)
        return applied(location(f, f.line_of(stmt)), [f"{code} after the optimizer"])

    def check(self, config, params, base):
        got = value(config, "fix.gc-freeze")
        return bool(got.get("frozen")), "objects frozen out of the collector", f"{got.get('frozen') or 0} frozen objects"
