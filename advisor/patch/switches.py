"""The script's own switches: an option or config key that turns a fix on in the script's own
code (``--amp``, ``--channels-last``, ``--compile``; ``cfg.use_amp``, ``enable_amp``, ``bf16``;
``TrainingArguments``' fields through ``HfArgumentParser``).

A switch is found where its value reaches the code path the fix changes:

- a gate: ``if args.amp:`` (or ``if not args.no_amp:``, ``ctx = autocast() if args.amp else
  nullcontext()``) whose branch holds the fix's code (an ``autocast``, ``channels_last``, a
  ``compile(``) and did not run, in a function that ran;
- an argument: ``torch.autocast(..., enabled=args.amp)`` entered with ``enabled=False``, its
  chain read up the live stack by the run (config ``autocast.provenance``).

``turn_on`` says how to turn it on: the command line where the option is one the run parsed
(config ``cli_options``: ``--amp`` added, a given ``--no-amp`` can't be), else where the user
keeps the value (advisor.patch.knobs: the YAML key, the flag's default). A switch's ``form`` is
what the script's code does there (AMP: the dtype, whether a GradScaler is made), so the trial
ladder can trial the script's own form beside advisor's (``script_forms``, ``trial_args``) and
the patch pass the switch with no edit (``form: "script"`` in the fix's params).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

import libcst as cst

from . import knobs, provenance
from .call_args import code_of, dotted_name, find_arg, last_name
from .core import PatchContext, SkipFix, SourceFile, location

# What each fix's own code looks like in a script
MARKERS: dict[str, re.Pattern] = {
    "amp": re.compile(r"\bautocast\b"),
    "channels-last": re.compile(r"\bchannels_last\b"),
    "torch-compile": re.compile(r"(\btorch\.compile|\.compile)\s*\("),
}
_SCALER = re.compile(r"\bGradScaler\b")


@dataclass
class Switch:
    fix: str                     # the fix it turns on: "amp", "channels-last", "torch-compile"
    test: str                    # the switch as the code reads it: "args.amp"
    where: str                   # the gate's (or the argument's) place, "path:LINE"
    on: bool = True              # the value that turns it on (False for `if not args.no_amp:`)
    how: str = "gate"            # "gate" (an if around the fix's code) or "argument" (enabled=...)
    form: dict = field(default_factory=dict)   # what the script does: {"dtype": "float16", "scaler": True}
    option: dict | None = None   # the command-line option behind it (config cli_options' entry)

    def as_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- finding

def _options(config: dict) -> list[dict]:
    return [o for o in ((config.get("cli_options") or {}).get("value") or []) if isinstance(o, dict)]


def _option_for(config: dict, test: str) -> dict | None:
    """The option the run parsed whose destination the test reads (``args.amp`` → dest amp)."""
    name = test.rsplit(".", 1)[-1]
    hits = [o for o in _options(config) if o.get("dest") == name]
    return hits[0] if len(hits) == 1 else None


def _simple(test) -> tuple[cst.BaseExpression, bool] | None:
    """(the switch, the value that takes the branch) for a test that reads one value."""
    if isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        inner = _simple(test.expression)
        return (inner[0], not inner[1]) if inner else None
    if dotted_name(test) is not None or knobs._key_of(test) is not None and isinstance(test, cst.Subscript):
        return test, True
    return None


def _amp_form(f: SourceFile, node, ctx: PatchContext) -> dict:
    """The dtype of the script's autocast in ``node`` (its default: float16 on CUDA) and whether the
    script makes a GradScaler."""
    dtype = None
    for c, s, _e in f.calls:
        if last_name(c.func) == "autocast" and f.pos[node].start.line <= s <= f.pos[node].end.line:
            found = find_arg(c, "dtype")
            name = dotted_name(found[1].value) if found else None
            dtype = (name or "").rsplit(".", 1)[-1] or None
            if found is None:
                dtype = "float16"      # torch.autocast's and torch.cuda.amp.autocast's CUDA default
            break
    # a dtype the code names; one it reads from elsewhere (dtype=amp_dtype) is not known here
    dtype = {"half": "float16", "bfloat16": "bfloat16", "float16": "float16"}.get(dtype or "")
    scaler = any(_SCALER.search(g.text) for g in knobs._files(ctx, f))
    return {"dtype": dtype, "scaler": scaler}


def _sites(ctx: PatchContext, fix: str) -> list[str]:
    """The places the fix acts on, as the run recorded them: the model's call (AMP), where the
    model was moved or bound (channels-last, compile)."""
    keys = ("input",) if fix == "amp" else ("first_model", "model", "parameters")
    out = []
    for key in keys:
        entry = ctx.config.get(key) or {}
        out += [str(w) for w in [*(entry.get("stack") or [])[:3], entry.get("where")] if w]
    return out


def _function(f: SourceFile, node):
    n = f.parent.get(node)
    while n is not None and not isinstance(n, (cst.FunctionDef, cst.Module)):
        n = f.parent.get(n)
    return n


def _relevant(ctx: PatchContext, f: SourceFile, node, fix: str) -> bool:
    """A gate on the fix's path: in the function of a place the fix acts on (the model's call
    for AMP, not an evaluation helper's; where the model was moved for the others). True where
    the run recorded none of them."""
    sites = _sites(ctx, fix)
    if not sites:
        return True
    here = _function(f, node)
    for where in sites:
        try:
            g, line = ctx.locate(where, "the fix's site")
        except SkipFix:
            continue
        stmt = g.stmt_at(line)
        if g is f and stmt is not None and _function(f, stmt) is here:
            return True
    return False


def _gates(ctx: PatchContext, f: SourceFile, fix: str) -> list[Switch]:
    marker = MARKERS[fix]
    out = []
    for node in f.pos:
        if isinstance(node, (cst.If, cst.IfExp)) and not _relevant(ctx, f, node, fix):
            continue
        if isinstance(node, cst.If):
            branches = [(node.body, True)]
            if isinstance(node.orelse, cst.Else):
                branches.append((node.orelse.body, False))
            simple = _simple(node.test)
            if simple is None or ctx.ran(f, node) is False:
                continue
            for body, taken in branches:
                code = f.module.code_for_node(body)
                first = body.body[0] if body.body else None
                other = [b for b, t in branches if t != taken]
                if not marker.search(code) or first is None or ctx.ran(f, first) is not False:
                    continue
                if other and marker.search(f.module.code_for_node(other[0])):
                    continue             # both branches do it (fp16 vs bf16): not an on/off switch
                out.append(_switch(ctx, f, fix, simple[0], simple[1] == taken, node, "gate", body))
        elif isinstance(node, cst.IfExp) and fix == "amp" and "autocast" not in ctx.config:
            simple = _simple(node.test)
            if simple is not None and marker.search(f.module.code_for_node(node.body)) and \
                    not marker.search(f.module.code_for_node(node.orelse)) and knobs.ran_at(ctx, f, node):
                out.append(_switch(ctx, f, fix, simple[0], simple[1], node, "gate", node.body))
    return out


def _switch(ctx: PatchContext, f: SourceFile, fix: str, test, on: bool, node, how: str, body) -> Switch:
    text = code_of(test)
    form = _amp_form(f, body, ctx) if fix == "amp" else {}
    return Switch(fix=fix, test=text, where=location(f, f.line_of(node)), on=on, how=how, form=form,
                  option=_option_for(ctx.config, text))


def _argument(ctx: PatchContext) -> list[Switch]:
    """``autocast(enabled=args.amp)`` the run entered with enabled=False: the chain of ``enabled``."""
    entry = ctx.config.get("autocast") or {}
    value = entry.get("value") or {}
    chain = provenance.chain_of(ctx, "autocast", "enabled")
    end = provenance.origin(chain)
    if value.get("enabled", True) or end is None or end.get("kind") not in ("option", "config", "static", "literal"):
        return []
    dtype = value.get("dtype")
    ran = ctx.config.get("grad_scaler") is not None
    option = end if end.get("kind") == "option" else None
    return [Switch(fix="amp", test=str(chain[0].get("expr") or end.get("expr") or "enabled"),
                   where=str(chain[0].get("where") or entry.get("where")), how="argument",
                   form={"dtype": dtype, "scaler": ran}, option=option)]


def find(ctx: PatchContext, fix: str) -> list[Switch]:
    """The script's own switches for ``fix``, the run's argument first, then the gates."""
    if fix not in MARKERS:
        return []
    out = _argument(ctx) if fix == "amp" else []
    seen = set()
    for f in knobs._files(ctx, ctx.script_file()):
        for s in _gates(ctx, f, fix):
            if (s.test, s.where) not in seen:
                seen.add((s.test, s.where))
                out.append(s)
    return out


# ----------------------------------------------------------------------------- turning one on

def turn_on(ctx: PatchContext, switch: Switch, what: str | None = None) -> tuple[list[str], dict]:
    """(edit descriptions, note fields) that turn the switch on: the command line (``argv_changes``)
    where its option is one the run parsed, else where the user keeps its value; SkipFix where
    neither is found."""
    what = what or f"the script's own switch {switch.test}"
    value = "True" if switch.on else "False"
    if switch.how == "argument":
        chain = provenance.chain_of(ctx, "autocast", "enabled")
        got = provenance.follow(ctx, chain, value, what)
        if got is not None:
            return got
    if switch.option is not None:
        end = {**switch.option, "kind": "option"}
        got = provenance.follow(ctx, [end], value, what)
        if got is not None:
            return got
    f, line = ctx.locate(switch.where, "the switch")
    node = _test_node(f, line, switch.test)
    if node is None:
        raise SkipFix(f"the switch {switch.test} at {switch.where} is not found in the source")
    return knobs.set_value(ctx, f, node, value, what)


def _test_node(f: SourceFile, line: int, text: str):
    for node, rng in f.pos.items():
        if rng.start.line == line and isinstance(node, (cst.If, cst.IfExp)):
            simple = _simple(node.test)
            if simple is not None and code_of(simple[0]) == text:
                return simple[0]
    for node, rng in f.pos.items():     # an argument: enabled=args.amp
        if rng.start.line == line and isinstance(node, cst.BaseExpression) and code_of(node) == text:
            return node
    return None


def use(ctx: PatchContext, fix: str, p: dict, what: str, form_ok=None) -> dict | None:
    """The fix's note through the script's own switch, or None where it has none that fits: a
    kept ``form: "script"`` (the trial ran the script's switch) turns that switch on; else a
    switch whose form ``form_ok`` accepts (advisor's dtype for AMP)."""
    want = p.get("switch")
    for s in find(ctx, fix):
        if want is not None and s.test != want:
            continue
        if want is None and form_ok is not None and not form_ok(s):
            continue
        try:
            edits, fields = turn_on(ctx, s, f"{what}: the script's own switch {s.test}")
        except SkipFix:
            continue
        sources = {s.test: fields.pop("source", [])}
        fields.pop("followed", None)
        switch = {**s.as_dict(), "option": (s.option or {}).get("options")}   # the option's words, not its record
        return {"applied": True, "where": s.where, "edits": edits, "edits_at": [s.where], "sources": sources,
                "switch": switch, **fields}
    return None


# ----------------------------------------------------------------------------- the ladder

def script_forms(ctx: PatchContext, fix: str, params: dict) -> list[dict]:
    """Trial candidates of the script's own form of ``fix``, beside advisor's ``params``: one for
    each switch that turns on from the command line alone and does something advisor's form does
    not (AMP in float16 with its GradScaler, where advisor runs bfloat16). Each is ``{"params":
    {"form": "script", "switch", "argv_changes", ...form}}``; its trial runs the script with
    those arguments (``trial_args``) and applies nothing itself."""
    out = []
    for s in find(ctx, fix):
        try:
            _edits, fields = turn_on(ctx, s)
        except SkipFix:
            continue
        changes = fields.get("argv_changes")
        if not changes or fields.get("env_changes"):
            continue
        if fix == "amp" and (s.form.get("dtype") or "float16") == (params.get("dtype") or "bfloat16"):
            continue     # the same form as advisor's: one trial says it
        out.append({"params": {"form": "script", "switch": s.test,
                               **{k: v for k, v in s.form.items() if v is not None}, "_argv_changes": changes}})
    return out


def trial_args(script_args: list[str], specs: list[dict]) -> list[str]:
    """The script's arguments for a trial of these fixes: each script-form fix's command-line
    changes made (as the patch's recommended command makes them: options.apply_argv_changes)."""
    from .options import apply_argv_changes

    changes = [ch for s in specs if (s.get("params") or {}).get("form") == "script"
               for ch in (s.get("params") or {}).get("_argv_changes") or []]
    return apply_argv_changes(list(script_args), changes)


def context(script: str, script_args: list[str], child: dict, cwd: str | None = None) -> PatchContext:
    """A PatchContext on the baseline's record (its config and executed lines), as make_patch
    builds one, for the ladder's questions (script_forms) outside a patch."""
    import os

    cwd = os.path.realpath(cwd or os.getcwd())
    path = os.path.realpath(os.path.join(cwd, script))
    return PatchContext(script=path, root=os.path.dirname(path), cwd=cwd, config=child.get("config") or {},
                        executed=child.get("executed_lines") or {}, argv=[str(a) for a in script_args],
                        environ=dict(os.environ))
