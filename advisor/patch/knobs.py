"""The user's knobs stay alive: a value that comes from a flag, a config file or a constant is
changed where the user keeps it, not replaced by a literal at the call.

``num_workers=args.workers`` becomes ``add_argument("--workers", default=8)`` (or, when the
user passes ``--workers 4`` on the command line, the advice to pass ``--workers 8``);
``num_workers=params.num_data_workers`` becomes ``num_data_workers: 8`` in the YAML section
the run read; ``**loader_kwargs`` has its ``'num_workers': 1`` entry changed; ``WORKERS = 2``
its literal. Where the source cannot be found the expression is kept and the note says which
value to give it. The run's executed lines decide between several candidates: only what ran.
"""

from __future__ import annotations

import os
import re

import libcst as cst

from . import options
from .call_args import code_of, dotted_name, find_arg, last_name
from .core import PatchContext, SkipFix, SourceFile, add_warning, location

_LITERALS = (cst.Integer, cst.Float, cst.SimpleString)
_YAML_SUFFIXES = (".yaml", ".yml")


def is_literal_value(expr) -> bool:
    if isinstance(expr, _LITERALS):
        return True
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.expression, (cst.Integer, cst.Float)):
        return True
    return isinstance(expr, cst.Name) and expr.value in ("True", "False", "None")


def _key_of(expr) -> str | None:
    """The knob's name: ``args.workers`` → workers, ``cfg["num_workers"]`` → num_workers."""
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1:
        idx = expr.slice[0].slice
        if isinstance(idx, cst.Index) and isinstance(idx.value, cst.SimpleString):
            return str(idx.value.evaluated_value)
        return None
    return last_name(expr)


def _files(ctx: PatchContext, f: SourceFile) -> list[SourceFile]:
    """The user's files that ran (the script and ``f`` always), parsed."""
    out = {id(f): f}
    for path in [ctx.script, *ctx.executed]:
        real = ctx._resolve_path(str(path))
        if real is None:
            continue
        try:
            g = ctx.file(real)
        except SkipFix:
            continue
        out.setdefault(id(g), g)
    return list(out.values())


def ran_at(ctx: PatchContext, f: SourceFile, node) -> bool:
    """Whether the statement holding ``node`` ran (True when the run recorded no lines)."""
    stmt = f.stmt_at(f.line_of(node))
    return stmt is None or ctx.ran(f, stmt) is not False


# ----------------------------------------------------------------------------- YAML

def _yaml_files(root: str, limit: int = 200) -> list[str]:
    out = []
    for base, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "node_modules")]
        out += [os.path.join(base, n) for n in names if n.endswith(_YAML_SUFFIXES)]
        if len(out) >= limit:
            break
    return sorted(out)[:limit]


def _yaml_scalar(text: str) -> str:
    """``!!bool False`` → ``False``; quotes off."""
    text = text.strip()
    if text.startswith("!!"):
        text = text.split(None, 1)[1] if " " in text else ""
    return text.strip("'\"")


def _yaml_value(new: str, old: str | None) -> str:
    """``new`` written as the file writes its value: a tag kept (``!!bool False``), a boolean's case."""
    old = old or ""
    tag = old.split()[0] + " " if old.startswith("!!") else ""
    value = new
    if new in ("True", "False"):
        value = new if (_yaml_scalar(old)[:1].isupper() or not old) else new.lower()
    return tag + value


def _argv_words(ctx: PatchContext) -> set[str]:
    """The command line's tokens and the values of its ``--flag=value`` ones."""
    return {*ctx.argv, *(t.split("=", 1)[1] for t in ctx.argv if t.startswith("-") and "=" in t)}


def _opened_yaml(ctx: PatchContext) -> list[str]:
    """The YAML files the run opened (config ``config_files``, runner/observe.py), that exist."""
    seen = (ctx.config.get("config_files") or {}).get("value") or []
    return [p for p in seen if isinstance(p, str) and os.path.isfile(p)]


def _argv_yaml(ctx: PatchContext) -> list[str]:
    """The YAML files the command line names (``--yaml_config my.yaml``, ``--cfg=a.yml``): the run
    reads those, not the parser's default file."""
    out = []
    for tok in ctx.argv:
        value = tok.split("=", 1)[-1]
        if not value.endswith(_YAML_SUFFIXES):
            continue
        for base in (ctx.cwd, os.path.dirname(ctx.script), ctx.root):
            path = os.path.realpath(os.path.join(base, value))
            if os.path.isfile(path):
                out.append(path)
                break
    return list(dict.fromkeys(out))


_TOP = re.compile(r"^([A-Za-z_][\w-]*)\s*:")   # a top-level key: a section's header


def _sections(lines: list[str]) -> dict[str, tuple[int, int | None]]:
    """{top-level section: (its header's line, the line of its ``<<:`` merge key or None)}."""
    out: dict[str, tuple[int, int | None]] = {}
    current = None
    for n, line in enumerate(lines, 1):
        top = _TOP.match(line)
        if top:
            current = top.group(1)
            out[current] = (n, None)
        elif current and re.match(r"^\s+<<\s*:", line):
            out[current] = (out[current][0], n)
    return out


def _inherited(ctx: PatchContext, path: str, lines: list[str], words: set[str], key: str, new: str, what: str):
    """The section the command line names (``words``) inherits ``key`` through a merge key
    (``<<: *B``): an override line in that section, never an edit of the anchor other sections
    share."""
    named = [(s, at) for s, at in _sections(lines).items() if s in words and at[1] is not None]
    if len(named) != 1:
        return None
    section, (_, merge) = named[0]
    indent = re.match(r"^(\s*)", lines[merge - 1]).group(1)
    # several fixes may each add a line after the same merge key: they accumulate
    before = ctx.text_edits.get(os.path.realpath(path), {}).get(merge, lines[merge - 1])
    ctx.text_edit(path, merge, f"{before}\n{indent}{key}: {new}")
    rel = os.path.relpath(path, ctx.root)
    return [f"{what}: {key}: {new} added to section {section} of {rel} (it inherited the value through "
            f"{lines[merge - 1].strip()})"], {"source": [f"{rel}:{section}.{key}"]}


def yaml_key(ctx: PatchContext, key: str, new: str, observed, what: str):
    """``key: new`` in the YAML the run read (see _yaml); a dotted key (``data.num_workers``,
    an OmegaConf config's full key) is the line at that path, wherever the leaf's name recurs.
    None where no one line holds it."""
    if "." in key:
        found = _yaml_path(ctx, key, new, what)
        if found is not None:
            return found
    return _yaml(ctx, key.rsplit(".", 1)[-1], new, observed, what)


_KEY_LINE = re.compile(r"^(\s*)([A-Za-z_][\w-]*)\s*:\s*([^#\n]*?)\s*(#.*)?$")


def _yaml_path(ctx: PatchContext, dotted: str, new: str, what: str):
    """The one ``leaf: value`` line at the nested path ``dotted`` (``data:`` then, indented,
    ``num_workers: 1``) in the YAML files the run read (else the command line names)."""
    hits = []
    for path in _opened_yaml(ctx) or _argv_yaml(ctx):
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        stack: list[tuple[int, str]] = []     # (indent, key) of the mappings around the line
        for n, line in enumerate(lines, 1):
            m = _KEY_LINE.match(line)
            if not m:
                continue
            indent = len(m.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            here = ".".join([k for _, k in stack] + [m.group(2)])
            if here == dotted and m.group(3):
                hits.append((path, n, m))
            stack.append((indent, m.group(2)))
    if len(hits) != 1:
        return None
    path, n, m = hits[0]
    value = _yaml_value(new, m.group(3).strip())
    ctx.text_edit(path, n, f"{m.group(1)}{m.group(2)}: {value}" + (f"  {m.group(4)}" if m.group(4) else ""))
    rel = os.path.relpath(path, ctx.root)
    return [f"{what}: {m.group(2)}: {value} in {rel}:{n} ({dotted})"], {"source": [f"{rel}:{dotted}"]}


def _yaml(ctx: PatchContext, key: str, new: str, observed, what: str):
    """A ``key: value`` line in the YAML files the run opened or the command line names (else the
    project's); where several sections set it, the one the command line names (``--config
    short``), else the one named default. A section the command line names that inherits the key
    gets an override line of its own."""
    pat = re.compile(rf"^(\s*){re.escape(key)}\s*:\s*([^#\n]*?)\s*(#.*)?$")
    hits = []
    texts: dict[str, list[str]] = {}    # each file holding the key, as read
    for path in _opened_yaml(ctx) or _argv_yaml(ctx) or _yaml_files(ctx.root):   # what the run read first
        try:
            lines = open(path, encoding="utf-8").read().splitlines()
        except (OSError, UnicodeDecodeError):
            continue
        section = None
        for n, line in enumerate(lines, 1):
            top = _TOP.match(line)
            if top:
                section = top.group(1)
            m = pat.match(line)
            if m and m.group(2):
                hits.append((path, n, line, m, section))
                texts[path] = lines
    words = _argv_words(ctx)
    if hits and not any(h[4] in words for h in hits):
        for path, lines in texts.items():
            found = _inherited(ctx, path, lines, words, key, _yaml_value(new, None), what)
            if found is not None:
                return found
    # the section the command line names first: the value the run observed may be a fix's
    # (--apply sets it at run time), and another section may hold that value already
    for pick in (lambda h: bool(h[4]) and h[4] in words,
                 lambda h: observed is not None and _yaml_scalar(h[3].group(2)).lower() == str(observed).lower(),
                 lambda h: h[4] == "default"):
        if len(hits) <= 1:
            break
        chosen = [h for h in hits if pick(h)]
        hits = chosen if len(chosen) == 1 else hits
    if len(hits) != 1:
        return None
    path, n, line, m, section = hits[0]
    value = _yaml_value(new, m.group(2).strip())
    ctx.text_edit(path, n, f"{m.group(1)}{key}: {value}" + (f"  {m.group(3)}" if m.group(3) else ""))
    rel = os.path.relpath(path, ctx.root)
    return [f"{what}: {key}: {value} in {rel}:{n}" + (f" (section {section})" if section else "")], \
        {"source": [f"{rel}:{section}.{key}" if section and section != key else f"{rel}:{n}"]}


# ----------------------------------------------------------------------------- parameters

MAX_DEPTH = 6   # links followed from the call to where the user keeps the value


def _enclosing_def(f: SourceFile, node) -> cst.FunctionDef | None:
    n = f.parent.get(node)
    while n is not None and not isinstance(n, cst.FunctionDef):
        n = f.parent.get(n)
    return n


def _is_method(f: SourceFile, fn: cst.FunctionDef) -> bool:
    """A function of a class whose first parameter is bound (self, cls): not a staticmethod."""
    block = f.parent.get(fn)
    return isinstance(block, cst.IndentedBlock) and isinstance(f.parent.get(block), cst.ClassDef) and \
        not any(last_name(d.decorator) == "staticmethod" for d in fn.decorators)


def _parameter(fn: cst.FunctionDef, name: str) -> tuple[int | None, cst.Param] | None:
    """(its position, or None for a keyword-only one; the parameter) of ``name`` in ``fn``."""
    positional = [*fn.params.posonly_params, *fn.params.params]
    for i, p in enumerate(positional):
        if p.name.value == name:
            return i, p
    for p in fn.params.kwonly_params:
        if p.name.value == name:
            return None, p
    return None


def _assigned_in(fn: cst.FunctionDef, name: str) -> bool:
    """Whether the function rebinds ``name`` (then the parameter is not the value at the call)."""
    for node in _walk(fn.body):
        if isinstance(node, (cst.AssignTarget, cst.AugAssign)) and isinstance(node.target, cst.Name) and \
                node.target.value == name:
            return True
    return False


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def _callers(ctx: PatchContext, files: list[SourceFile], f: SourceFile, fn: cst.FunctionDef):
    """(file, call, whether ``self`` is bound) of the calls of ``fn`` that ran: by its name, and
    a class's by the class's name for ``__init__``."""
    method = _is_method(f, fn)
    names = {fn.name.value}
    if method and fn.name.value == "__init__":
        names = {f.parent.get(f.parent.get(fn)).name.value}
    for g in files:
        for call, _s, _e in g.calls:
            if last_name(call.func) in names and ran_at(ctx, g, call):
                yield g, call, method


def _through_parameter(ctx: PatchContext, f: SourceFile, expr: cst.Name, new: str, what: str, observed,
                       depth: int):
    """A value that is a parameter of the function it is used in: changed where the callers that ran
    pass it (their argument followed on: a flag, a config value, a literal), else at the parameter's
    default. None when ``expr`` is no parameter."""
    fn = _enclosing_def(f, expr)
    found = _parameter(fn, expr.value) if fn is not None else None
    if found is None or _assigned_in(fn, expr.value):
        return None
    index, param = found
    cli = options.decorated_option(ctx, f, fn, param, new, what)   # click / typer fill it from the command line
    if cli is not None:
        return cli[0], _hop(cli[1], location(f, f.line_of(expr)))
    passed = []
    for g, call, method in _callers(ctx, _files(ctx, f), f, fn):
        # obj.run(8) and Train(8) bind self: the call's positions start at the def's second
        bound = method and (isinstance(call.func, cst.Attribute) or fn.name.value == "__init__")
        pos = None if index is None else index - (1 if bound else 0)
        arg = find_arg(call, param.name.value, pos if pos is not None and pos >= 0 else None)
        if arg is not None and not arg[1].star and arg[1].value is not expr:
            passed.append((g, arg[1].value))
    # a caller that passes the value first; the parameter's default only when none does (a
    # call of another function of the same name, model.train(), passes nothing)
    for g, value in passed or ([(f, param.default)] if param.default is not None else []):
        try:
            done, more = set_value(ctx, g, value, new, what, observed, depth + 1)
            return done, _hop(more, location(f, f.line_of(expr)))
        except SkipFix:
            continue
    return None


# ----------------------------------------------------------------------------- environment

class UnsetVariable(SkipFix):
    """The value comes from an environment variable the run did not set and the code has no
    default for: the user must set it."""


_ENV_CALLS = ("os.environ.get", "environ.get", "os.getenv", "getenv", "os.environ.setdefault", "environ.setdefault")


def _env_read(expr) -> tuple[str, object] | None:
    """(NAME, its default expression or None) for ``os.environ.get("NAME", d)``, ``os.getenv``,
    ``os.environ.setdefault`` and ``os.environ["NAME"]``; None for anything else."""
    if isinstance(expr, cst.Call) and dotted_name(expr.func) in _ENV_CALLS and expr.args and \
            isinstance(expr.args[0].value, cst.SimpleString) and expr.args[0].keyword is None:
        default = expr.args[1].value if len(expr.args) > 1 else (find_arg(expr, "default") or (None, None))[1]
        default = getattr(default, "value", default) if isinstance(default, cst.Arg) else default
        return str(expr.args[0].value.evaluated_value), default
    if isinstance(expr, cst.Subscript) and dotted_name(expr.value) in ("os.environ", "environ") and \
            len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index) and \
            isinstance(expr.slice[0].slice.value, cst.SimpleString):
        return str(expr.slice[0].slice.value.evaluated_value), None
    return None


def _through_environment(ctx: PatchContext, f: SourceFile, expr, new: str, what: str, observed,
                         depth: int) -> tuple[list[str], dict] | None:
    """A value read from an environment variable: set in the run's environment → the
    recommended command sets it to ``new`` (note ``env_changes``); not set → its default,
    followed where the user keeps it. None when ``expr`` reads no variable."""
    read = _env_read(expr)
    if read is None:
        return None
    name, default = read
    value = new[1:-1] if new.startswith(("'", '"')) else new
    if name in ctx.environ:
        old = ctx.environ[name]
        if old == value:
            return [f"{what}: {name}={value} is already in the environment"], {"source": [f"env:{name}"]}
        return ([f"{what}: run with {name}={value} (the environment had {name}={old})"],
                {"env_changes": [{"name": name, "from": old, "to": value}], "source": [f"env:{name}"]})
    if default is None:
        raise UnsetVariable(f"{what} comes from the environment variable {name}, not set in this run: "
                            f"set {name}={value}")
    if isinstance(default, cst.SimpleString):   # os.environ.get("W", "2"): the default stays a string
        new = repr(value)
    done, more = set_value(ctx, f, default, new, what, observed, depth + 1)
    return [f"{d} ({name} is not set)" for d in done], _hop(more, f"env:{name}")


# ----------------------------------------------------------------------------- assignments

def _sources(ctx: PatchContext, files: list[SourceFile], key: str):
    """Where a value named ``key`` is made: dict entries ``{"key": v}``, ``dict(key=v)``,
    ``key = v`` and dataclass fields ``key: int = v`` (or ``field(default=v)``), that ran."""
    out = []
    for g in files:
        for node in g.pos:
            if isinstance(node, cst.DictElement) and isinstance(node.key, cst.SimpleString) and \
                    node.key.evaluated_value == key and ran_at(ctx, g, node):
                out.append((g, node.value))
            elif isinstance(node, cst.Call) and last_name(node.func) == "dict" and ran_at(ctx, g, node):
                found = find_arg(node, key)
                if found is not None:
                    out.append((g, found[1].value))
        for st, _s, _e in g.stmts:
            if not isinstance(st, cst.SimpleStatementLine) or len(st.body) != 1 or ctx.ran(g, st) is False:
                continue
            small = st.body[0]
            target = small.targets[0].target if isinstance(small, cst.Assign) and len(small.targets) == 1 else None
            if target is not None and (dotted_name(target) == key or dotted_name(target) == f"self.{key}"):
                out.append((g, small.value))   # key = v; self.key = v (an attribute set in a method)
            elif isinstance(small, cst.AnnAssign) and dotted_name(small.target) == key and small.value is not None:
                v = small.value
                if isinstance(v, cst.Call) and last_name(v.func) == "field":
                    d = find_arg(v, "default")
                    v = d[1].value if d is not None else None
                if v is not None:
                    out.append((g, v))
    return out


def _hop(fields: dict, where: str) -> dict:
    """The note's fields with one more link at the front of the value's source chain."""
    return {**fields, "source": [where, *fields.get("source", [])]}


def set_value(ctx: PatchContext, f: SourceFile, expr, new: str, what: str, observed=None,
              _depth: int = 0) -> tuple[list[str], dict]:
    """Make the value ``expr`` (in ``f``) be ``new`` when the script runs, changing it where
    the user keeps it. Returns (edit descriptions, note fields such as argv_changes and the
    value's ``source``: the chain from the call to where it is set, ["trainer.py:11",
    "main.py:9", "argv:--numworkers"], as config.<key>.source records it); raises
    SkipFix, saying which value to give, when its source cannot be found."""
    if is_literal_value(expr):
        ctx.on_node(f, expr, lambda _n: cst.parse_expression(new))
        return [f"{what}={new} at {location(f, f.line_of(expr))}"], {"source": [location(f, f.line_of(expr))]}
    if isinstance(expr, cst.Call) and last_name(expr.func) in ("int", "float", "bool", "str") and \
            len(expr.args) == 1 and expr.args[0].keyword is None and not expr.args[0].star:
        return set_value(ctx, f, expr.args[0].value, new, what, observed, _depth)   # int(opt.workers)
    found = _through_environment(ctx, f, expr, new, what, observed, _depth) if _depth <= MAX_DEPTH else None
    if found is not None:
        return found[0], _hop(found[1], location(f, f.line_of(expr)))
    if isinstance(expr, cst.Name) and _depth <= MAX_DEPTH:
        found = _through_parameter(ctx, f, expr, new, what, observed, _depth)
        if found is not None:
            return found
    key = _key_of(expr)
    if key is None or _depth > MAX_DEPTH:
        raise SkipFix(f"{what} comes from `{code_of(expr)}` at {location(f, f.line_of(expr))}: give it {new}")
    files = _files(ctx, f)
    # an option left unset (default None) defers to the config file it overrides when passed
    found = options.argparse_option(ctx, files, key, new, what, unset_too=False)
    if found is not None:
        return found[0], _hop(found[1], location(f, f.line_of(expr)))
    deeper = None   # why the value's source found further on could not be changed: said, if nothing else is
    for g, value in _sources(ctx, files, key):
        if value is expr:
            continue
        try:
            done, more = set_value(ctx, g, value, new, what, observed, _depth + 1)
            return done, _hop(more, location(f, f.line_of(expr)))
        except SkipFix as e:
            deeper = deeper or e
    found = options.override_word(ctx, key, new, what) or _yaml(ctx, key, new, observed, what) or \
        options.argparse_option(ctx, files, key, new, what)
    if found is not None:
        return found[0], _hop(found[1], location(f, f.line_of(expr)))
    if isinstance(deeper, UnsetVariable):   # more use to the user than "give it N"
        raise deeper
    raise SkipFix(f"{what} comes from `{code_of(expr)}` at {location(f, f.line_of(expr))}: give it {new}")


def change(ctx: PatchContext, f: SourceFile, expr, new: str, what: str, edits: list[str], extra: dict,
           observed=None, chain: list[dict] | None = None) -> bool:
    """``set_value`` for an editor's note: its edit descriptions join ``edits``, its fields
    (argv_changes) join ``extra``, the value's source chain goes under ``extra["sources"][what]``;
    a value whose source is not found becomes the note's warning, and False is returned.
    ``chain``: the value's chain as the run followed it up the live stack (config
    ``<key>.provenance``, advisor.patch.provenance), used first; the static chain from ``expr``
    is the fallback."""
    from . import provenance

    got = provenance.follow(ctx, chain, new, what, observed) if chain else None
    try:
        if got is not None:
            done, more = got
        elif expr is None:
            raise SkipFix(f"{what} reaches the call through arguments advisor could not follow: give it {new}")
        else:
            done, more = set_value(ctx, f, expr, new, what, observed)
    except SkipFix as e:
        add_warning(extra, str(e))
        return False
    edits += done
    extra.setdefault("sources", {})[what] = more.pop("source", [])
    if more.pop("followed", None):      # the chain the run read up its live stack
        extra.setdefault("followed", {})[what] = "run time"
    for k, v in more.items():
        extra.setdefault(k, []).extend(v)
    return True
