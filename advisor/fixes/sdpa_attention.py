"""``sdpa-attention``: a Hugging Face model's attention through PyTorch's fused
``scaled_dot_product_attention`` instead of eager matmul, softmax, matmul.

The trial switches the trained model's attention at its first forward (transformers reads
``config._attn_implementation`` at every forward); the patch asks for it where the model is
made: the ``attn_implementation`` argument of its ``from_pretrained``/``from_config`` call, or
of the model config it is built from, followed to where the user sets it (a flag, a constant).
The same attention in another order: numerics change to rounding, checked as such.

The whole fix lives here: the trial's run-time part, the edit, and the check.
"""

from __future__ import annotations

from advisor.fixes.base import Fix, value

IMPLEMENTATION = "sdpa"
_switched: dict = {}   # in the trial's process: the model's class and attention once switched


class SdpaAttention(Fix):
    name = "sdpa-attention"
    changes_numerics = True

    def describe(self, params):
        return "attention through torch's scaled_dot_product_attention (attn_implementation='sdpa')"

    def not_applicable(self, config, environment, params):
        attention = value(config, "attention")
        if not attention:
            return "no Hugging Face model names its attention implementation"
        if attention.get("implementation") != "eager":
            return f"the model's attention is {attention.get('implementation')!r} already"
        if not attention.get("sdpa"):
            return f"{attention.get('class') or 'the model'} does not support sdpa attention"
        return None

    def apply(self, params):
        """At the first outermost forward: the model whose config names its attention is switched
        (set_attn_implementation where transformers has it, else its config, which the attention
        layers read at each forward)."""
        from advisor.runtime.patching import outermost_forward

        def switch(module, args):
            if _switched:
                return None
            for m in module.modules():
                cfg = getattr(m, "config", None)
                if isinstance(getattr(cfg, "_attn_implementation", None), str):
                    if hasattr(m, "set_attn_implementation"):
                        m.set_attn_implementation(IMPLEMENTATION)
                    else:
                        cfg._attn_implementation = IMPLEMENTATION
                    _switched.update({"class": type(m).__name__, "implementation": cfg._attn_implementation})
                    break
            return None

        outermost_forward(pre=switch)

    def observe(self) -> dict | None:
        return dict(_switched) or None

    def edit(self, ctx, fix, params):
        from advisor.patch.attention import sdpa_edit

        return sdpa_edit(ctx, fix, IMPLEMENTATION)

    def check(self, config, params, base):
        got = value(config, "attention").get("implementation")
        return (None if got is None else got == IMPLEMENTATION), f"attention {IMPLEMENTATION}", f"attention {got}"
