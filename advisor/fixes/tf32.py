"""``tf32``: float32 matrix products and convolutions on TF32 Tensor Cores."""

from __future__ import annotations

from advisor.fixes.base import Fix


class Tf32(Fix):
    name = "tf32"
    runtime = "tf32"
    editor = "advisor.patch.flag_fixes:tf32"
    changes_numerics = True
    rides_with_compile = True
    allowed_by = "precision"   # float32 products in TF32 keep 10 mantissa bits of 23

    def overrides(self, config):
        """A script that turned TF32 off, or asked for the highest float32 precision, in its own
        code keeps full float32 products."""
        for key, off, text in (("tf32.matmul", False, "torch.backends.cuda.matmul.allow_tf32 = False"),
                               ("tf32.cudnn", False, "torch.backends.cudnn.allow_tf32 = False"),
                               ("float32_matmul_precision", "highest",
                                'torch.set_float32_matmul_precision("highest")')):
            entry = config.get(key) or {}
            if entry.get("value") == off and entry.get("where"):   # no place: torch's own default
                return f"{text} at {entry['where']}"
        return None

    def transformers_args(self, ctx, fix, params, calls):
        return [("tf32", "True")], {}

    def lightning_edit(self, ctx, fix, params, trainers):
        import libcst as cst

        from advisor.patch.call_args import last_name
        from advisor.patch.core import PRIO_TF32, SkipFix, applied, location

        if not trainers:
            raise SkipFix("no Trainer(...) call that ran was found in the user's files")
        f = trainers[0].file
        for call, line, _ in f.calls:
            arg = call.args[0].value if last_name(call.func) == "set_float32_matmul_precision" and call.args else None
            if isinstance(arg, cst.SimpleString):
                if arg.evaluated_value != "highest":
                    raise SkipFix(f"{location(f, line)} already sets the float32 matmul precision")
                ctx.on_node(f, arg, lambda _n: cst.parse_expression('"high"'))   # "highest" turns TF32 off
                return applied(location(f, line), ['set_float32_matmul_precision("high")'])
        code = 'torch.set_float32_matmul_precision("high")'
        return applied(location(f, f.line_of(ctx.after_imports(f, code, PRIO_TF32))), [code + " after the imports"])

    def check(self, config, params, base):
        got = (config.get("tf32.matmul") or {}).get("value")
        return (None if got is None else bool(got)), "tf32.matmul = True", f"tf32.matmul = {got}"
