"""channels_last: NHWC memory format for the model's 4-D weights and 4-D inputs.

The model is converted in place at its first call, and every 4-D floating tensor argument of an
outermost module call is converted on the way in.

The conversion acts on the modules that own the weights, never through the model's own
``.to()``: a task module wrapping a model and its loss may override ``.to()`` (timm's probes
``torch.empty(0).to(*args, **kwargs)`` first, which raises "required rank 4 tensor to use
channels_last format" for a 1-D probe). It has two forms, the second tried where the first
raises: torch's own ``Module.to`` called on each module that owns a 4-D parameter or buffer
(torch's ``_apply``: tensor subclasses swapped as torch swaps them), then each 4-D tensor's
``.data`` replaced alone (no module method at all). Both keep the Parameter objects, so the
optimizer's references stay valid. Where neither form converts the model, the fix refuses
to apply (the trial is skipped, with the errors) instead of breaking the script.
"""

from __future__ import annotations

import torch

from advisor.runtime.patching import not_applied, outermost_forward

NAME = "channels-last"


def describe(params) -> str:
    return "channels_last model and 4-D inputs"


def not_applicable(config, environment, params):
    inp = (config.get("input") or {}).get("value") or {}
    shape = inp.get("shape")
    if shape is not None and len(shape) != 4:
        return f"the model's input is {len(shape)}-D; channels_last applies to 4-D image batches"
    return None


def _convert(x):
    if isinstance(x, torch.Tensor) and x.dim() == 4:
        return x.contiguous(memory_format=torch.channels_last)
    return x


def owners(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules that own a 4-D parameter or buffer themselves (a Conv2d, a user's block
    holding a 4-D weight of its own), each once."""
    return [m for m in model.modules()
            if any(t is not None and t.dim() == 4 for t in (*m._parameters.values(), *m._buffers.values()))]


def _by_module(model: torch.nn.Module) -> None:
    """torch's Module.to on each owner, whatever the classes' own ``.to()`` (never called)."""
    for m in owners(model):
        torch.nn.Module.to(m, memory_format=torch.channels_last)


def _by_tensor(model: torch.nn.Module) -> None:
    """Each 4-D parameter's and buffer's data (and a parameter's gradient) replaced by its
    channels_last copy: no module method runs."""
    with torch.no_grad():
        for m in owners(model):
            for t in (*m._parameters.values(), *m._buffers.values()):
                if t is None or t.dim() != 4:
                    continue
                t.data = t.data.contiguous(memory_format=torch.channels_last)
                if isinstance(t, torch.nn.Parameter) and t.grad is not None and t.grad.dim() == 4:
                    t.grad.data = t.grad.data.contiguous(memory_format=torch.channels_last)


FORMS = (("torch's Module.to on each module owning 4-D weights", _by_module),
         ("each 4-D weight's data replaced", _by_tensor))


def convert(model: torch.nn.Module) -> list[str]:
    """The model's 4-D weights in channels_last, by the first form that converts them all;
    returns the errors of the forms that raised (all of them, each "form: error", where none
    converted the model; then the weights are left as they are)."""
    errors = []
    for label, form in FORMS:
        try:
            form(model)
        except Exception as e:  # noqa: BLE001 - the next form is tried
            errors.append(f"{label}: {type(e).__name__}: {e}")
            continue
        if all(t.is_contiguous(memory_format=torch.channels_last) for m in owners(model)
               for t in (*m._parameters.values(), *m._buffers.values()) if t is not None and t.dim() == 4):
            return []
        errors.append(f"{label}: left a 4-D weight in another memory format")
    return errors


def apply(params) -> None:
    converted: set[int] = set()

    def pre(module, args):
        if id(module) not in converted:
            converted.add(id(module))
            if owners(module):
                errors = convert(module)
                if errors:
                    not_applied(NAME, "could not convert the model's weights to channels_last (" +
                                "; ".join(errors) + ")")
        return tuple(_convert(a) for a in args)

    outermost_forward(pre=pre)
