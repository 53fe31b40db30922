"""A fix's value changed where the run-time chain says it is set (advisor.runtime.provenance:
read from the live call stack when the call ran, in run.json's ``config.<key>.provenance``).

The chain's last link is where the value is set:

- an option the user gave (``--numworkers 1``): the recommended command passes the new value,
  the code is not edited;
- an option the user did not give: the recommended command adds it (``--numworkers 8``; a bare
  ``--amp`` for a switch), again with no edit;
- an OmegaConf/Hydra key: the override word the command line gave is changed, under Hydra one is
  added (``data.num_workers=8``), else the YAML file the run read is edited;
- a literal in the user's code: that literal is edited, wherever it is (a constant, a dataclass
  field's default, a parameter's default), never a line downstream of it; a library's literal
  (a loader factory's ``workers=0``): the argument is added to the user's call of it;
- a place the run could not follow further: the static chain (advisor.patch.knobs) goes on from
  that expression.

``follow`` returns None where the chain says nothing usable; the caller then follows the value
statically from the call, as before.
"""

from __future__ import annotations

import libcst as cst

from . import options
from .call_args import set_arg
from .core import PatchContext, SkipFix, SourceFile, location

_LITERAL_NODES = (cst.Integer, cst.Float, cst.SimpleString, cst.Name, cst.UnaryOperation, cst.ConcatenatedString)
_HOPS = ("arg", "param", "local", "global", "field", "attr", "dict", "kwargs", "partial", "default", "import")


def chain_of(ctx: PatchContext, key: str, arg: str) -> list[dict] | None:
    """The run-time chain of ``arg`` at the config entry ``key`` (e.g. "dataloader", "num_workers")."""
    entry = ctx.config.get(key)
    chains = entry.get("provenance") if isinstance(entry, dict) else None
    chain = chains.get(arg) if isinstance(chains, dict) else None
    return chain if isinstance(chain, list) and chain else None


def origin(chain: list[dict] | None) -> dict | None:
    return chain[-1] if chain else None


def _unquote(new: str) -> str:
    return new[1:-1] if new[:1] in ("'", '"') and new[-1:] == new[:1] else new


def _hops(ctx: PatchContext, chain: list[dict]) -> list[str]:
    """The chain's places as run.json's ``source`` lists them (paths as the patch's, relative
    to its root; a library's as the run gave them): the call's argument first."""
    out: list[str] = []
    for link in chain[:-1]:
        where = link.get("where")
        if link.get("kind") not in _HOPS or not where:
            continue
        got = None if link.get("lib") else _file(ctx, where)
        where = location(got[0], got[1]) if got else where
        if not out or out[-1] != where:
            out.append(where)
    return out


def follow(ctx: PatchContext, chain: list[dict] | None, new: str, what: str,
           observed=None) -> tuple[list[str], dict] | None:
    """Make the value the chain ends at be ``new`` (code, as the patch writes it: ``8``,
    ``True``, ``"bfloat16"``). Returns (edit descriptions, note fields: ``argv_changes``, the
    value's ``source``), or None to leave it to the static chain."""
    end = origin(chain)
    if end is None:
        return None
    kind = end.get("kind")
    try:
        if kind == "option":
            got = _option(ctx, end, new, what)
        elif kind == "config":
            got = _config(ctx, end, new, what, observed)
        elif kind == "literal":
            got = _literal(ctx, chain, end, new, what)
        elif kind in ("static", "key"):
            got = _static(ctx, end, new, what, observed)
        else:
            got = None
    except SkipFix:
        got = None
    if got is None:
        return None
    done, fields = got
    hops = _hops(ctx, chain)
    tail = fields.get("source") or []
    fields["source"] = hops + [s for s in tail if not hops or s != hops[-1]]
    fields["followed"] = "run time"
    return done, fields


# ----------------------------------------------------------------------------- command line

def _long(end: dict) -> str:
    opts = end.get("options") or []
    return next((o for o in opts if o.startswith("--")), opts[0] if opts else f"--{end.get('dest')}")


def _option(ctx: PatchContext, end: dict, new: str, what: str) -> tuple[list[str], dict] | None:
    """An argparse option: the command line's word changed, or the option added to it."""
    value = _unquote(new)
    action = end.get("action")
    if end.get("from_argv") is False:     # parse_args(some_list): the command line does not reach it
        return None
    if end.get("choices") and value not in [str(c) for c in end["choices"]]:
        return None
    if action in ("store_true", "store_false", "BooleanOptionalAction"):
        return _switch(ctx, end, value, what)
    if action != "store":      # append, count, a custom action: the static chain's
        return None
    if end.get("given"):
        flag, old = end.get("flag"), end.get("value")
        if not flag or old is None or not _in_argv(ctx, flag, old):
            return None
        done, fields = options._on_command_line((flag, old), value, what)
        return done, {**fields, "source": [f"argv:{_long(end)}"]}    # the option's name, not the prefix typed
    flag = _long(end)
    default = end.get("default")
    return ([f"{what}: pass {flag} {value} (the command line did not give it; its default is {default!r})"],
            {"argv_changes": [{"flag": flag, "from": None, "to": value}], "source": [f"argv:{flag}"]})


def _in_argv(ctx: PatchContext, flag: str, old: str) -> bool:
    """The word the run saw is in the arguments the patch starts from (``--w 1``, ``--w=1``, ``-j1``)."""
    for i, tok in enumerate(ctx.argv):
        if tok == flag and i + 1 < len(ctx.argv) and ctx.argv[i + 1] == old:
            return True
        if tok in (f"{flag}={old}", f"{flag}{old}") and (len(flag) == 2 or "=" in tok):
            return True
    return False


def _switch(ctx: PatchContext, end: dict, value: str, what: str) -> tuple[list[str], dict] | None:
    """A flag that takes no value: ``--amp`` (store_true) turned on by passing it."""
    want = value in ("True", "true", "1")
    action, opts = end.get("action"), end.get("options") or []
    on_flag = _long(end)
    if action == "store_false":
        want, on_flag = not want, _long(end)     # --no-amp: passed, the value is False
    elif action == "BooleanOptionalAction" and not want:
        on_flag = next((o for o in opts if o.startswith("--no-")), None)
        want = True
    if not want or on_flag is None:
        return None
    if end.get("given") and end.get("flag") in opts and (end.get("flag") == on_flag or action != "BooleanOptionalAction"):
        return [f"{what}: {on_flag} is already on the command line"], {"source": [f"argv:{on_flag}"]}
    return ([f"{what}: pass {on_flag} (the script's own switch; the command line did not give it)"],
            {"argv_changes": [{"flag": on_flag, "from": None, "to": None}], "source": [f"argv:{on_flag}"]})


# ----------------------------------------------------------------------------- configs

def _config(ctx: PatchContext, end: dict, new: str, what: str, observed) -> tuple[list[str], dict] | None:
    """An OmegaConf/Hydra key: the override word on the command line, else a word added under
    Hydra, else the YAML file the run read."""
    from . import knobs

    key, leaf = str(end.get("key") or ""), str(end.get("leaf") or "")
    value = _unquote(new)
    for tok in ctx.argv:
        name, eq, old = tok.partition("=")
        if eq and not name.startswith("-") and name.lstrip("+~") == key:
            return options._on_command_line((name, old), value, what)
    if end.get("cli") == "hydra":
        return ([f"{what}: pass {key}={value} (a Hydra override; the command line did not give one)"],
                {"argv_changes": [{"flag": key, "from": None, "to": value}], "source": [f"argv:{key}"]})
    return knobs.yaml_key(ctx, key or leaf, new, observed, what)


# ----------------------------------------------------------------------------- code

def _file(ctx: PatchContext, where: str | None) -> tuple[SourceFile, int] | None:
    if not where:
        return None
    try:
        return ctx.locate(where, "the value's place")
    except SkipFix:
        return None


def node_at(f: SourceFile, at: list[int] | None, kinds=(cst.BaseExpression,)):
    """The expression of ``f`` at ``at`` ([line, col, end_line, end_col], as the run recorded it)."""
    if not at or len(at) != 4:
        return None
    hits = []
    for node, rng in f.pos.items():
        if isinstance(node, kinds) and (rng.start.line, rng.start.column) == (at[0], at[1]):
            exact = (rng.end.line, rng.end.column) == (at[2], at[3])
            hits.append((not exact, -(rng.end.line - rng.start.line), node))
    hits.sort(key=lambda h: (h[0], h[1]))
    return hits[0][2] if hits else None


def _literal(ctx: PatchContext, chain: list[dict], end: dict, new: str, what: str):
    """A constant in the source: edited where it is, in the user's code; a library's constant
    (its parameter's default) by passing the argument at the user's call of it."""
    if not end.get("lib"):
        got = _file(ctx, end.get("where"))
        node = node_at(got[0], end.get("at"), _LITERAL_NODES) if got else None
        if node is None:
            return None
        f = got[0]
        ctx.on_node(f, node, lambda _n: cst.parse_expression(new))
        here = location(f, f.line_of(node))
        return [f"{what}={new} at {here}"], {"source": [here]}
    call = next((link for link in reversed(chain) if link.get("kind") == "call" and not link.get("lib")), None)
    if call is None:
        return None
    got = _file(ctx, call.get("where"))
    node = node_at(got[0], call.get("at"), (cst.Call,)) if got else None
    if node is None or not call.get("param"):
        return None
    f, name = got[0], str(call["param"])
    ctx.on_node(f, node, lambda c: set_arg(c, name, new))
    here = location(f, f.line_of(node))
    return [f"{what}: {name}={new} passed at {here} (the library's default was {end.get('expr')})"], \
        {"source": [here]}


def _static(ctx: PatchContext, end: dict, new: str, what: str, observed):
    """Where the run could not follow the value further: the static chain from that expression."""
    from . import knobs

    if end.get("lib"):
        return None
    got = _file(ctx, end.get("where"))
    node = node_at(got[0], end.get("at")) if got else None
    if node is None:
        return None
    return knobs.set_value(ctx, got[0], node, new, what, observed)
