"""``torch-compile``: the model compiled with torch.compile (CUDA graphs: mode reduce-overhead)."""

from __future__ import annotations

from advisor.fixes.base import Fix, trained, value

CUDA_GRAPHS_GRADS = ("CUDA graphs (torch.compile mode=\"reduce-overhead\") need gradients set to None "
                     "between steps: kept with set_to_none=False, backward reads a gradient the next "
                     "replay has overwritten, and the step fails")


class TorchCompile(Fix):
    name = "torch-compile"
    runtime = "compile"
    editor = "advisor.patch.model_fixes:torch_compile"
    # each later trial would pay a new compile, and what compile gains depends on what the
    # step looks like once the other fixes are in: tried after every other queued fix
    last = True
    compiles = True
    beyond_estimate = True
    slow_start = True
    where_key = "parameters"

    def candidates(self, params, environment):
        if params.get("mode"):
            return [{"params": {"mode": params["mode"]}}]
        plain = {"params": {"mode": "default"}, "group": self.name}
        if not environment.get("gpu_count"):
            return [plain]
        # On a GPU, CUDA graphs (reduce-overhead) take the launch cost away too; plain compile
        # is their fallback, tried only when they cannot apply, crash or are not accepted
        # (once reduce-overhead is kept, default on top of it would not be stacked anyway).
        return [{"params": {"mode": "reduce-overhead"}, "group": self.name, "fallback": plain,
                 "fallback_when": ("skipped", "failed", "rejected")}]

    def requires(self, params, config, names):
        """At run time advisor compiles the model at its first call, after an eager step, so the
        gradients are plain tensors the graphs only add into; the edited script compiles it from
        the start, and with zero_grad(set_to_none=False) its gradients would be CUDA graph
        outputs, overwritten by the next replay."""
        zero_grad = value(config, "zero_grad")
        if params.get("mode") == "reduce-overhead" and "set-to-none" not in names \
                and zero_grad.get("set_to_none") is False:
            return [{"intervention": "set-to-none", "params": {}, "reason": CUDA_GRAPHS_GRADS}]
        return []

    def transformers_args(self, ctx, fix, params, calls):
        mode = params.get("mode")
        return [("torch_compile", "True")] + ([("torch_compile_mode", f'"{mode}"')]
                                             if mode not in (None, "default") else []), {}

    def lightning_edit(self, ctx, fix, params, trainers):
        """torch.compile(model) handed to fit, not model.compile(): Lightning unwraps it
        (from_compiled) and compiles the module's forward AND its training_step, so a
        training_step calling self.net(x) is compiled too (Module.compile only compiles
        model(...), which Lightning never calls). The user's name stays bound to the
        LightningModule; checkpoints keep their keys."""
        import libcst as cst

        from advisor.patch.core import applied, location
        from advisor.patch.frameworks import _fit

        f, stmt, call, arg = _fit(ctx, trainers, "torch.compile(model)")
        mode = params.get("mode") if params.get("mode") not in (None, "default") else None
        code = f'torch.compile({arg.value.value}, mode="{mode}")' if mode else f"torch.compile({arg.value.value})"
        ctx.on_node(f, arg.value, lambda _n: cst.parse_expression(code))
        ctx.need_torch(f)
        return applied(location(f, f.line_of(call)), [f"fit({code}, ...) at {location(f, f.line_of(call))}"])

    def check(self, config, params, base):
        graphs = trained(config).get("compiled_graphs")
        return (None if graphs is None else graphs > 0), "torch.compile graphs", f"{graphs} compiled graphs"
