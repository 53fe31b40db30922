"""Python's garbage collector pausing the training thread inside the timed steps.

What it does:
    Reads the collections Python's cyclic garbage collector ran on the training thread during
    the timed window (the runner's ``gc.callbacks`` clock): how many of each generation, how
    long they held the thread, the longest one. Fires when they took a visible share of the
    window and the script has not frozen its objects out of the collector.

Why is this bad:
    A full collection walks every tracked Python object the process keeps alive: a model's
    modules and parameters' wrappers, a dataset held as Python lists and dicts, a tokenizer's
    tables, a logger's history. With a large heap one such walk takes tens to hundreds of
    milliseconds, in whichever step it falls; the GPU waits for the host meanwhile, and the
    step-time spread grows. The objects made during set-up live for the whole run, yet every
    full collection walks them again.

Example:
    dataset = [json.loads(line) for line in open("train.jsonl")]   # millions of dicts, kept
    for batch in loader:
        history.append({"loss": loss, "batch": batch})             # cyclic records, collected later

Fix:
    Once set-up is done (after the optimizer is made), collect once, freeze what exists, and
    make young-generation collections rarer:
    import gc
    gc.collect(); gc.freeze(); gc.set_threshold(50_000, *gc.get_threshold()[1:])

Fix safety:
    Numerics are unchanged. Frozen objects are never collected: a reference cycle made during
    set-up and dropped later stays in memory (usually none of consequence). A higher
    generation-0 threshold lets garbage cycles build up longer between collections: memory
    grows a little between them.
"""

from ._common import fix, ms, pct

CODE = "ADV120"
NAME = "gc-pauses"
SEVERITY = "warning"
NEEDS = ("steps",)
FIX = "gc-freeze"
HITS = ("gc_heavy_cpu",)
NON_HITS = {"gc_light_cpu": "a loop that makes no cyclic garbage: its collections take next to nothing",
            "gc_frozen_cpu": "the same churning loop with its set-up frozen out of the collector (gc-freeze)"}
CODE_HINT = "import gc\ngc.collect(); gc.freeze(); gc.set_threshold(50_000, *gc.get_threshold()[1:])"


def check(ctx):
    measured = ctx.analysis.get("measured") or {}
    frac = measured.get("gc_frac")
    if frac is None or frac < ctx.thresholds.gc_frac:
        return None
    if ((ctx.value("fix.gc-freeze") or {}).get("frozen")):
        return None   # frozen already: what is left is the run's own garbage
    gens = measured.get("gc_collections") or [0, 0, 0]
    per_step = float(measured.get("gc_ms_per_step") or 0.0)
    return {
        "message": f"Python's garbage collector held the training thread {pct(frac)} of the timed steps "
                   f"({ms(per_step)} a step).",
        "evidence": [f"collections in the timed window: {gens[0]} of generation 0, {gens[1]} of 1, "
                     f"{gens[2]} full",
                     f"longest collection: {ms(float(measured.get('gc_longest_ms') or 0.0))}",
                     f"collector time: {ms(per_step)} a step, {pct(frac)} of the window"],
        "estimated_gain_ms": per_step,
        "fix": fix("gc-freeze", changes_numerics=False, code=CODE_HINT, where=ctx.where("optimizer")),
    }
