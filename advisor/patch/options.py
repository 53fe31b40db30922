"""Options of a command-line parser, where a value the patch changes is set: the command line
when the user passes the option (the recommended command then passes the new value), else the
option's default in the code. argparse's ``add_argument``, click's ``@click.option`` on the
function that receives the value, typer's ``typer.Option`` (or a plain parameter of a typer
command), and a Hydra/OmegaConf ``key=value`` override word."""

from __future__ import annotations

import libcst as cst

from .call_args import find_arg, last_name, set_arg
from .core import PatchContext, SkipFix, SourceFile, location


def apply_argv_changes(argv: list[str], changes: list[dict]) -> list[str]:
    """The arguments with these changes made (notes' ``argv_changes``): a value the command line
    gives replaced (``--workers 4``, ``--workers=4``, ``-j4``), an option it did not give
    (``from`` None) added: ``--flag value``, a bare ``--flag`` (``to`` None) or a ``key=value``
    override word, before a ``--`` that ends the options, once."""
    out = list(argv)
    for ch in changes:
        flag = ch["flag"]
        if ch.get("from") is None:
            value = ch.get("to")
            words = [flag] if value is None else [flag, str(value)] if flag.startswith("-") else [f"{flag}={value}"]
            if flag not in out and not any(t.startswith(flag + "=") for t in out):
                at = out.index("--") if "--" in out else len(out)
                out[at:at] = words
            continue
        value = str(ch["to"])
        for i, tok in enumerate(out):
            if tok == flag and i + 1 < len(out):
                out[i + 1] = value
            elif tok.startswith(flag + "="):
                out[i] = f"{flag}={value}"
            elif len(flag) == 2 and tok == flag + str(ch["from"]):   # -j4
                out[i] = flag + value
    return out


def _on_command_line(passed: tuple[str, str], new: str, what: str) -> tuple[list[str], dict]:
    """The edit for an option the user passed: the command line's value changes."""
    flag, old = passed
    value = new if not (new.startswith(("'", '"'))) else new[1:-1]
    if old == value:
        return [f"{what}: {flag} {value} is already on the command line"], {"source": [f"argv:{flag}"]}
    return ([f"{what}: pass {flag} {value} (the command line gave {flag} {old})"],
            {"argv_changes": [{"flag": flag, "from": old, "to": value}], "source": [f"argv:{flag}"]})


def _dest(call: cst.Call) -> tuple[str | None, list[str]]:
    """(dest, option strings) of an ``add_argument(...)`` call."""
    opts = [a.value.evaluated_value for a in call.args if a.keyword is None and isinstance(a.value, cst.SimpleString)]
    given = find_arg(call, "dest")
    if given is not None and isinstance(given[1].value, cst.SimpleString):
        return str(given[1].value.evaluated_value), opts
    longs = [o for o in opts if o.startswith("--")]
    if longs:
        return longs[0][2:].replace("-", "_"), opts
    if opts and not opts[0].startswith("-"):
        return opts[0], opts
    return (opts[0].lstrip("-").replace("-", "_") if opts else None), opts


def _in_argv(argv: list[str], opts: list[str]) -> tuple[str, str] | None:
    """(flag, value) the user passed for this option, if any."""
    for i, tok in enumerate(argv):
        for o in opts:
            if not o.startswith("-"):
                continue
            if tok == o and i + 1 < len(argv):
                return o, argv[i + 1]
            if o.startswith("--") and tok.startswith(o + "="):
                return o, tok.split("=", 1)[1]
    return None


def _unset_default(call: cst.Call) -> bool:
    """An option whose default is None (or none given): "not set", the value then comes from
    elsewhere (a config file the option overrides only when passed)."""
    got = find_arg(call, "default")
    return got is None or (isinstance(got[1].value, cst.Name) and got[1].value.value == "None")


def argparse_option(ctx: PatchContext, files: list[SourceFile], key: str, new: str, what: str,
              unset_too: bool = True):
    """The option ``key`` comes from: the command line's value changed, else its default;
    ``unset_too`` False leaves an option that was not passed and whose default is None alone."""
    for g in files:
        for call, _s, _e in g.calls:
            if last_name(call.func) != "add_argument":
                continue
            dest, opts = _dest(call)
            if dest != key:
                continue
            passed = _in_argv(ctx.argv, opts)
            if passed is None and not unset_too and _unset_default(call):
                continue
            if passed is not None:
                return _on_command_line(passed, new, what)
            added = _added_on_command_line(ctx, key, opts, new, what)
            if added is not None:
                return added
            ctx.on_node(g, call, lambda c: set_arg(c, "default", new))
            return [f"{what}: the default of {'/'.join(o for o in opts if o.startswith('-')) or key} "
                    f"becomes {new} at {location(g, g.line_of(call))}"], {"source": [location(g, g.line_of(call))]}
    return None


def _added_on_command_line(ctx: PatchContext, dest: str, opts: list[str], new: str, what: str):
    """An option the run parsed (config ``cli_options``, advisor.runtime.cli_seen) and the command
    line did not give: the recommended command adds it, the code is not edited. None where the
    run recorded no such option (a run.json from before, a parser advisor did not see)."""
    from . import provenance

    recorded = [o for o in ((ctx.config.get("cli_options") or {}).get("value") or [])
                if isinstance(o, dict) and o.get("dest") == dest and set(o.get("options") or []) & set(opts)]
    if len(recorded) != 1 or recorded[0].get("given"):
        return None
    got = provenance.follow(ctx, [{**recorded[0], "kind": "option"}], new, what)
    if got is not None:
        got[1].pop("followed", None)     # the static chain's, ending at an option the run recorded
    return got


# ----------------------------------------------------------------------------- click, typer

def _strings(call: cst.Call) -> list[str]:
    return [str(a.value.evaluated_value) for a in call.args
            if a.keyword is None and isinstance(a.value, cst.SimpleString)]


def _click_option(fn: cst.FunctionDef, name: str) -> cst.Call | None:
    """The ``@click.option(...)`` of ``fn`` that fills its parameter ``name``."""
    for d in fn.decorators:
        call = d.decorator
        if isinstance(call, cst.Call) and last_name(call.func) == "option" and _dest(call)[0] == name:
            return call
    return None


def _typer_option(param: cst.Param) -> cst.Call | None:
    """``typer.Option(...)`` as the parameter's default or in its ``Annotated[...]``."""
    calls = [param.default] if isinstance(param.default, cst.Call) else []
    ann = param.annotation.annotation if param.annotation is not None else None
    if isinstance(ann, cst.Subscript) and last_name(ann.value) == "Annotated":
        calls += [e.slice.value for e in ann.slice[1:] if isinstance(e.slice, cst.Index)
                  and isinstance(e.slice.value, cst.Call)]
    return next((c for c in calls if last_name(c.func) == "Option"), None)


def _typer_command(f: SourceFile, fn: cst.FunctionDef) -> bool:
    """A function typer runs: ``@app.command()`` or ``typer.run(fn)``."""
    if any(isinstance(d.decorator, cst.Call) and last_name(d.decorator.func) == "command" for d in fn.decorators):
        return True
    return any(last_name(c.func) == "run" and c.args and isinstance(c.args[0].value, cst.Name) and
               c.args[0].value.value == fn.name.value for c, _s, _e in f.calls)


def decorated_option(ctx: PatchContext, f: SourceFile, fn: cst.FunctionDef, param: cst.Param, new: str,
                     what: str) -> tuple[list[str], dict] | None:
    """A parameter a click or typer command line fills: the option the user passed is changed on
    the command line; else its default where the code gives it. None for any other parameter."""
    name = param.name.value
    click = _click_option(fn, name)
    if click is not None:
        passed = _in_argv(ctx.argv, _dest(click)[1])
        if passed is not None:
            return _on_command_line(passed, new, what)
        ctx.on_node(f, click, lambda c: set_arg(c, "default", new))
        return [f"{what}: the default of {'/'.join(o for o in _dest(click)[1] if o.startswith('-'))} "
                f"becomes {new} at {location(f, f.line_of(click))}"], {"source": [location(f, f.line_of(click))]}
    typer = _typer_option(param)
    if typer is None and not _typer_command(f, fn):
        return None
    flags = [s for s in _strings(typer) if s.startswith("-")] if typer is not None else []
    passed = _in_argv(ctx.argv, flags or ["--" + name.replace("_", "-")])
    if passed is not None:
        return _on_command_line(passed, new, what)
    if typer is param.default and typer.args and not (typer.args[0].keyword is None and
                                                      isinstance(typer.args[0].value, cst.SimpleString)):
        ctx.on_node(f, typer, lambda c: set_arg(c, "default", new, 0))   # typer.Option(2, "--workers")
        where = location(f, f.line_of(typer))
    elif param.default is not None and not isinstance(param.default, cst.Call):
        ctx.on_node(f, param.default, lambda _n: cst.parse_expression(new))
        where = location(f, f.line_of(param.default))
    else:
        raise SkipFix(f"{what} comes from the option --{name.replace('_', '-')}, which has no default to change: "
                      f"pass --{name.replace('_', '-')} {new}")
    return [f"{what}: the default of --{name.replace('_', '-')} becomes {new} at {where}"], {"source": [where]}


# ----------------------------------------------------------------------------- key=value words

def override_word(ctx: PatchContext, key: str, new: str, what: str) -> tuple[list[str], dict] | None:
    """A Hydra/OmegaConf-style override on the command line (``data.num_workers=4``,
    ``+trainer.workers=4``): it wins over every config file, so the command line changes."""
    for tok in ctx.argv:
        name, eq, old = tok.partition("=")
        if not eq or name.startswith("-"):
            continue
        if name.lstrip("+~").rsplit(".", 1)[-1] == key:
            return _on_command_line((name, old), new, what)
    return None
