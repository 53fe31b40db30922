"""``tf32``: float32 matrix products and convolutions on TF32 Tensor Cores."""

from __future__ import annotations

from advisor.fixes.base import Fix


class Tf32(Fix):
    name = "tf32"
    runtime = "tf32"
    editor = "advisor.patch.flag_fixes:tf32"
    changes_numerics = True
    rides_with_compile = True

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
