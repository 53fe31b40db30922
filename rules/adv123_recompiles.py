"""torch.compile compiling again inside the training steps: shapes that keep changing.

What it does:
    Counts the graphs torch.compile made during the timed window, after the warm-up (the runner
    reads Dynamo's graph count at each step's end), and names the graph breaks Dynamo met in
    the run. Fires when two or more graphs were made inside the window.

Why is this bad:
    A graph compiled for static shapes is specialized on them: a batch of another sequence
    length, or a last short batch, fails its guards and Dynamo traces and compiles again,
    seconds each time, inside a training step. After ``cache_size_limit`` (8) graphs for one
    function, Dynamo gives up and runs it eagerly, so a run of many lengths loses compile's
    gain as well. Graph breaks split the model into several graphs with Python between them.

Example:
    model = torch.compile(model, dynamic=False)
    for batch in loader:                      # each batch padded to its own longest text
        loss = model(batch["input_ids"]).loss

Fix:
    Let the graph take any length, or make the lengths few:
    model = torch.compile(model, dynamic=True)                    # one graph for every length
    torch._dynamo.mark_dynamic(input_ids, 1)                      # or only this dimension
    pad to a few bucket lengths (multiples of 64), or drop_last=True for the short last batch

Fix safety:
    Numerics are unchanged. A dynamic graph can run a little slower than a specialized one
    (less constant folding, no CUDA graphs for the shapes it has not seen), so measure it.
"""

from ._common import fix

CODE = "ADV123"
NAME = "recompiles"
SEVERITY = "warning"
NEEDS = ("steps",)
FIX = "dynamic-shapes"
HITS = ("recompiles_static_cpu",)
NON_HITS = {"recompiles_dynamic_cpu": "the same model compiled with dynamic=True: one graph for every length",
            "gc_light_cpu": "no torch.compile"}
CODE_HINT = "model = torch.compile(model, dynamic=True)  # or torch._dynamo.mark_dynamic(x, dim); or pad to a few lengths"


def check(ctx):
    measured = ctx.analysis.get("measured") or {}
    n = int(measured.get("window_compiles") or 0)
    if n < ctx.thresholds.window_compiles:
        return None
    steps = int(measured.get("steps") or 0)
    evidence = [f"{n} graphs compiled during the {steps} timed steps (after the warm-up)"]
    for b in (measured.get("graph_breaks") or [])[:3]:
        evidence.append(f"graph break ({b.get('count')}x): {b.get('reason')}")
    return {
        "message": f"torch.compile compiled {n} new graphs inside the timed steps: the shapes it is given keep "
                   "changing, and each new one is traced and compiled again.",
        "evidence": evidence,
        "estimated_gain_ms": None,
        "fix": fix("dynamic-shapes", changes_numerics=False, code=CODE_HINT, suggest_only=True),
    }
