"""The sdpa-attention fix's edit: ``attn_implementation`` asked for where the model is made.

The model's own call comes first: ``*.from_pretrained(...)`` or ``*.from_config(...)`` of a
model class (not a tokenizer's or a config's), that ran. Failing one, the model config it is
built from: an ``...Config(...)`` constructor that ran (a ``config._attn_implementation = X``
assignment is not followed yet). A value the call already passes (``attn_implementation=
args.attn``) is followed to where the user sets it (advisor.patch.knobs): the flag's default,
or the flag on the command.
"""

from __future__ import annotations

import libcst as cst

from . import knobs
from .call_args import dotted_name, find_arg, last_name, set_arg
from .core import PatchContext, SkipFix, applied, location

_MAKERS = ("from_pretrained", "from_config", "_from_config")
_NOT_MODELS = ("Tokenizer", "Processor", "Config", "FeatureExtractor", "ImageProcessor")


def _is_model_call(call: cst.Call) -> bool:
    owner = dotted_name(call.func.value) if isinstance(call.func, cst.Attribute) else None
    return last_name(call.func) in _MAKERS and owner is not None and not any(w in owner for w in _NOT_MODELS)


def _is_config_call(call: cst.Call) -> bool:
    name = last_name(call.func) or ""
    return name.endswith("Config") and name not in ("Config", "AutoConfig") and name[:1].isupper()


def _ran_calls(ctx: PatchContext, pred) -> list:
    """(file, call) of the calls in the user's files that ran and match."""
    files = knobs._files(ctx, ctx.script_file())
    return [(f, c) for f in files for c, _, _ in f.calls if pred(c) and knobs.ran_at(ctx, f, c)]


def sdpa_edit(ctx: PatchContext, fix: dict, impl: str) -> dict:
    new = f'"{impl}"'
    for pred, what in ((_is_model_call, "the model's"), (_is_config_call, "its config's")):
        found = _ran_calls(ctx, pred)
        if len(found) > 1:
            places = ", ".join(location(f, f.line_of(c)) for f, c in found)
            raise SkipFix(f"several calls could make the model ({places}): pass attn_implementation={new} "
                          "to the one that makes the trained model")
        if not found:
            continue
        f, call = found[0]
        where = location(f, f.line_of(call))
        arg = find_arg(call, "attn_implementation")
        if arg is None:
            ctx.on_node(f, call, lambda c: set_arg(c, "attn_implementation", new))
            return applied(where, [f"attn_implementation={new} in {what} call at {where}"])
        edits: list[str] = []
        extra: dict = {}
        if not knobs.change(ctx, f, arg[1].value, new, "attn_implementation", edits, extra):
            raise SkipFix(extra.get("warning") or f"attn_implementation at {where}: give it {new}")
        return applied(where, edits, **extra)
    raise SkipFix(f"no from_pretrained/from_config call or model config that ran: pass attn_implementation={new} "
                  "where the model is made")
