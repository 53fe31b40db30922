"""Where a call's value comes from, read from the live call stack when the call runs (a
DataLoader made, autocast entered, a model compiled or converted), inside the script's
process.

From the frame making the call, frame by frame: the argument expression there (the call's own
place in the source: ``co_positions``), the parameter it binds in the callee, the argument the
caller passed for that parameter, on up; through a parameter that defaults to ``None`` and is
set under ``if num_workers is None:`` (the caller's value wins where it passes one), ``**kwargs``
and the dicts they unpack, ``functools.partial``, dataclass and attrs fields, dict entries,
argparse namespaces (``args.numworkers`` → the option ``--numworkers``, and whether the run's
arguments gave it: advisor.runtime.cli_seen), OmegaConf/Hydra configs, and library frames (a
library's loader factory called from the user's code). Values are read, never computed: names,
attributes (statically, where a property could run code), subscripts by a constant.

A chain is a list of links, the call's argument first and where the value is set last:

    {"kind": "arg", "where": "trainer.py:14", "expr": "num_workers", "at": [14, 56, 14, 67]}
    {"kind": "param", "where": "trainer.py:10", "name": "num_workers", "reassigned": "trainer.py:12", "guard": true}
    {"kind": "arg", "where": "main.py:10", "expr": "args.numworkers", ...}
    {"kind": "option", "dest": "numworkers", "options": ["--numworkers"], "given": true, "value": "1", ...}

The last link is the origin: ``literal`` (a constant in the source: ``at`` places it),
``option``, ``config`` (an OmegaConf key), or ``static`` (a place the run cannot follow further,
from which advisor.patch.knobs' static chain goes on); ``unknown`` where nothing is known.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import functools
import inspect
import os
import sys
import types
from dataclasses import dataclass

from . import source_ast as sa

MAX_LINKS = 24
_CASTS = ("int", "float", "bool", "str")


class Unknown(Exception):
    """A value that cannot be read without running the script's code."""


@dataclass
class Scope:
    """Where an expression is read: a live frame, or a module's namespace."""
    filename: str
    fn: ast.AST                 # the def (or the module) the expression sits in
    frame: object | None        # the live frame running ``fn``, None for a module's namespace
    local: dict
    globals: dict
    line: int

    @classmethod
    def of_frame(cls, frame) -> Scope | None:
        fn = sa.function_of(frame)
        if fn is None:
            return None
        local = frame.f_locals if fn is not None and not isinstance(fn, ast.Module) else frame.f_globals
        return cls(frame.f_code.co_filename, fn, frame, dict(local), frame.f_globals, frame.f_lineno)

    @classmethod
    def of_module(cls, filename: str, namespace: dict, line: int = 0) -> Scope | None:
        got = sa.tree(filename)
        return None if got is None else cls(filename, got[0], None, namespace, namespace, line)

    def at(self, line: int) -> Scope:
        return dataclasses.replace(self, line=line)


# ----------------------------------------------------------------------------- reading values

def _omegaconf(obj) -> bool:
    return type(obj).__module__.startswith("omegaconf")


def _attr(obj, name: str):
    if _omegaconf(obj):
        return getattr(obj, name)
    if isinstance(obj, types.ModuleType):
        return obj.__dict__[name]
    try:
        got = inspect.getattr_static(obj, name)
    except AttributeError as e:
        raise Unknown(name) from e
    if isinstance(got, types.MemberDescriptorType):   # __slots__: read by C, no user code
        return getattr(obj, name)
    if isinstance(got, (property, functools.cached_property)) or hasattr(type(got), "__get__") and \
            not isinstance(got, (types.FunctionType, staticmethod, classmethod, type)):
        raise Unknown(name)
    own = getattr(obj, "__dict__", {}) if not isinstance(obj, type) else {}
    if isinstance(got, types.FunctionType) and not isinstance(obj, type) and name not in own:
        return types.MethodType(got, obj)           # a method, bound as the call binds it
    if isinstance(got, classmethod):
        return types.MethodType(got.__func__, obj if isinstance(obj, type) else type(obj))
    if isinstance(got, staticmethod):
        return got.__func__
    return got


def _item(obj, key):
    if type(obj) in (dict, list, tuple) or _omegaconf(obj) or isinstance(obj, types.MappingProxyType):
        return obj[key]
    raise Unknown(repr(key))


def peek(node: ast.AST, scope: Scope):
    """The value of a name, attribute or constant subscript in ``scope``, read without calling
    the script's code; Unknown otherwise."""
    try:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
            return -node.operand.value
        if isinstance(node, ast.Name):
            for space in (scope.local, scope.globals):
                if node.id in space:
                    return space[node.id]
            builtins = scope.globals.get("__builtins__")
            builtins = builtins if isinstance(builtins, dict) else vars(builtins) if builtins else {}
            if node.id in builtins:
                return builtins[node.id]
            raise Unknown(node.id)
        if isinstance(node, ast.Attribute):
            return _attr(peek(node.value, scope), node.attr)
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            return _item(peek(node.value, scope), node.slice.value)
    except Unknown:
        raise
    except Exception as e:  # noqa: BLE001 - a KeyError, an OmegaConf error: unknown
        raise Unknown(type(e).__name__) from e
    raise Unknown(type(node).__name__)


def _same(a, b) -> bool:
    try:
        return type(a) is type(b) and bool(a == b) or a is b
    except Exception:  # noqa: BLE001 - a tensor's ambiguous truth value
        return a is b


def _plain(value):
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)[:80]


def _literal(node) -> bool:
    return isinstance(node, ast.Constant) or isinstance(node, ast.UnaryOp) and \
        isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant)


def _last_name(node) -> str | None:
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


# ----------------------------------------------------------------------------- the walk

@dataclass
class _Binding:
    kind: str                   # "arg", "kwargs", "partial", "none", "unknown"
    scope: Scope | None = None
    node: ast.AST | None = None
    call: ast.Call | None = None


class Walker:
    """Follows values from a call up the live stack (see the module's doc)."""

    def __init__(self, sites, cli=None):
        self.sites = sites
        self.cli = cli          # advisor.runtime.cli_seen.CliSeen, or None

    # ------------------------------------------------------------------ entry points
    def at_call(self, frame, call: ast.Call, wanted: dict[str, int | None]) -> dict[str, list[dict]]:
        """{parameter: its chain} for the call ``frame`` makes; ``wanted``: each parameter's
        position among the call's positional arguments (None: keyword only)."""
        scope = Scope.of_frame(frame)
        out: dict[str, list[dict]] = {}
        if scope is None:
            return out
        for name, pos in wanted.items():
            links: list[dict] = []
            try:
                self._argument(scope, call, name, pos, links)
            except RecursionError:
                links.append({"kind": "unknown", "why": "too deep"})
            except Exception as e:  # noqa: BLE001 - an observation never breaks the script
                links.append({"kind": "unknown", "why": f"{type(e).__name__}: {e}"[:200]})
            out[name] = links[:MAX_LINKS]
        return out

    def of_expr(self, frame, node: ast.AST) -> list[dict]:
        """The chain of an expression the frame evaluates (an ``if args.amp:`` switch's test)."""
        scope = Scope.of_frame(frame)
        links: list[dict] = []
        if scope is not None:
            try:
                self._expr(scope.at(node.lineno), node, links)
            except Exception as e:  # noqa: BLE001
                links.append({"kind": "unknown", "why": f"{type(e).__name__}: {e}"[:200]})
        return links[:MAX_LINKS]

    # ------------------------------------------------------------------ links
    def _link(self, kind: str, scope: Scope, node: ast.AST | None = None, line: int | None = None, **extra) -> dict:
        got = sa.tree(scope.filename)
        lines = got[1] if got else []
        ln = line or (node.lineno if node is not None and hasattr(node, "lineno") else scope.line)
        out = {"kind": kind, "where": f"{self.sites.display(scope.filename)}:{ln}"}
        if node is not None and hasattr(node, "lineno"):
            out["expr"] = sa.code(node)
            out["at"] = sa.span(node, lines)
        if not self.sites.is_script_code(scope.filename):
            out["lib"] = True
        out.update(extra)
        return out

    # ------------------------------------------------------------------ the call's argument
    def _argument(self, scope: Scope, call: ast.Call, name: str, pos: int | None, links: list) -> None:
        node = next((k.value for k in call.keywords if k.arg == name), None)
        if node is None and pos is not None:
            positional = []
            for a in call.args:
                if isinstance(a, ast.Starred):
                    break
                positional.append(a)
            node = positional[pos] if pos < len(positional) else None
        if node is not None:
            links.append(self._link("arg", scope, node, param=name))
            return self._expr(scope.at(node.lineno), node, links)
        func = self._peek_or(call.func, scope)
        if isinstance(func, functools.partial) and name in func.keywords:
            return self._partial(scope, call, name, links)
        for k in call.keywords:
            if k.arg is None:
                links.append(self._link("kwargs", scope, k.value, key=name))
                return self._key(scope.at(k.value.lineno), k.value, name, links)
        links.append(self._link("omitted", scope, call, param=name))

    def _peek_or(self, node, scope, default=None):
        try:
            return peek(node, scope)
        except Unknown:
            return default

    # ------------------------------------------------------------------ expressions
    def _expr(self, scope: Scope, node: ast.AST, links: list, depth: int = 0) -> None:
        if len(links) >= MAX_LINKS:
            links.append({"kind": "unknown", "why": "too long"})
            return
        if _literal(node):
            links.append(self._link("literal", scope, node, value=_plain(self._peek_or(node, scope))))
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CASTS and \
                len(node.args) == 1 and not node.keywords and not isinstance(node.args[0], ast.Starred):
            return self._expr(scope, node.args[0], links)          # int(opt.workers)
        if isinstance(node, ast.Name):
            return self._name(scope, node, links)
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            return self._member(scope, node, links)
        links.append(self._link("static", scope, node))      # a call, arithmetic: the static chain's

    def _name(self, scope: Scope, node: ast.Name, links: list) -> None:
        n = node.id
        fn = scope.fn
        if scope.frame is not None and not isinstance(fn, ast.Module):
            co = scope.frame.f_code
            nargs = co.co_argcount + co.co_kwonlyargcount
            if n in co.co_varnames[:nargs]:
                return self._param(scope, node, links)
            if self._varkw(scope) == n:
                links.append(self._link("static", scope, node))
                return
            assigned = sa.assignments(fn, n, before=node.lineno)
            if assigned:
                return self._assigned(scope, node, assigned[-1], links)
            if n in co.co_varnames or n in co.co_cellvars or n in co.co_freevars:
                links.append(self._link("static", scope, node))     # bound where the walk cannot see
                return
        return self._global(scope, node, n, links)

    def _assigned(self, scope: Scope, node: ast.AST, stmt: ast.AST, links: list) -> None:
        links.append(self._link("local", scope, None, line=stmt.lineno, name=_last_name(node) or sa.code(node)))
        value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign, ast.NamedExpr)) else None
        single = isinstance(stmt, ast.NamedExpr) or isinstance(stmt, ast.AnnAssign) or \
            isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
        if value is None or not single:
            links.append(self._link("static", scope, node))
            return
        self._expr(scope.at(stmt.lineno), value, links)

    def _global(self, scope: Scope, node: ast.AST, n: str, links: list, seen: int = 0) -> None:
        got = sa.tree(scope.filename)
        if got is None or seen > 4:
            links.append(self._link("static", scope, node))
            return
        mod = got[0]
        assigned = sa.assignments(mod, n)
        module_scope = Scope(scope.filename, mod, None, scope.globals, scope.globals, 0)
        if assigned:
            stmt = assigned[-1]
            links.append(self._link("global", module_scope, None, line=stmt.lineno, name=n))
            value = stmt.value if isinstance(stmt, (ast.Assign, ast.AnnAssign)) else None
            if value is None:
                links.append(self._link("static", scope, node))
                return
            return self._expr(module_scope.at(stmt.lineno), value, links)
        for imp in (s for s in sa.own_nodes(mod) if isinstance(s, ast.ImportFrom)):
            for alias in imp.names:
                if (alias.asname or alias.name) == n:
                    where = self._imported_module(scope, imp)
                    if where is not None:
                        links.append(self._link("import", module_scope, imp, name=n))
                        other = Scope.of_module(where.__file__, vars(where))
                        if other is not None:
                            return self._global(other, node, alias.name, links, seen + 1)
        links.append(self._link("static", scope, node))

    @staticmethod
    def _imported_module(scope: Scope, imp: ast.ImportFrom):
        name = imp.module or ""
        if imp.level:
            pkg = (scope.globals.get("__package__") or "").split(".")
            base = pkg[:len(pkg) - imp.level + 1] if imp.level > 1 else pkg
            name = ".".join([p for p in base if p] + ([name] if name else []))
        mod = sys.modules.get(name)
        return mod if mod is not None and str(getattr(mod, "__file__", "")).endswith(".py") else None

    # ------------------------------------------------------------------ parameters
    @staticmethod
    def _varkw(scope: Scope) -> str | None:
        co = scope.frame.f_code
        if not co.co_flags & inspect.CO_VARKEYWORDS:
            return None
        i = co.co_argcount + co.co_kwonlyargcount + (1 if co.co_flags & inspect.CO_VARARGS else 0)
        return co.co_varnames[i]

    def _param(self, scope: Scope, node: ast.Name, links: list) -> None:
        n, fn = node.id, scope.fn
        defaults = sa.params(fn)
        default = defaults.get(n)
        bound = self._caller(scope, n)
        now = scope.local.get(n)
        link = self._link("param", scope, None, line=fn.lineno, name=n)
        reassigned = [s for s in sa.assignments(fn, n, before=node.lineno) if s is not fn]
        if reassigned:
            # set in the function: unconditionally, the assignment makes the value; under a
            # test of the parameter (`if n is None: n = ...`, `n = n or 4`), what the caller
            # passes wins where it passes one, so the caller's source is still the knob
            passed = self._passed(bound, default, scope)
            guarded = any(self._guarded(fn, s, n) for s in reassigned)
            if not guarded:
                return self._assigned(scope, node, reassigned[-1], links)
            link.update(reassigned=f"{self.sites.display(scope.filename)}:{reassigned[-1].lineno}", guard=guarded,
                        value=_plain(now), passed=_plain(passed) if passed is not _UNREAD else None)
        links.append(link)
        if bound.kind == "arg":
            links.append(self._link("arg", bound.scope, bound.node, param=n))
            return self._expr(bound.scope.at(bound.node.lineno), bound.node, links)
        if bound.kind == "kwargs":
            links.append(self._link("kwargs", bound.scope, bound.node, key=n))
            return self._key(bound.scope.at(bound.node.lineno), bound.node, n, links)
        if bound.kind == "partial":
            return self._partial(bound.scope, bound.call, n, links)
        if bound.kind == "none":
            call_link = self._link("call", bound.scope, bound.call, param=n)   # the caller's call, without it
            links.append(call_link)
            if default is not None:
                here = self._module_scope(scope)
                links.append(self._link("default", here, default, param=n))
                return self._expr(here.at(default.lineno), default, links)
            links.append({"kind": "unknown", "why": f"{n} has no default and its caller gives none"})
            return
        links.append(self._link("static", scope, node))   # a caller the walk cannot read (click, typer)

    def _module_scope(self, scope: Scope) -> Scope:
        got = sa.tree(scope.filename)
        return Scope(scope.filename, got[0] if got else scope.fn, None, scope.globals, scope.globals, 0)

    def _passed(self, bound: _Binding, default, scope: Scope):
        try:
            if bound.kind == "arg":
                return peek(bound.node, bound.scope)
            if bound.kind == "none":
                return peek(default, self._module_scope(scope)) if default is not None else _UNREAD
        except Unknown:
            pass
        return _UNREAD

    @staticmethod
    def _guarded(fn: ast.AST, stmt: ast.AST, n: str) -> bool:
        """An assignment that keeps a value the caller passes: under ``if n is None:`` (any test
        reading ``n``), or one that reads ``n`` itself (``n = n or 4``)."""
        if any(isinstance(x, ast.Name) and x.id == n for x in ast.walk(getattr(stmt, "value", None) or ast.Pass())):
            return True
        up = sa.parents(fn)
        node = up.get(stmt)
        while node is not None and node is not fn:
            if isinstance(node, ast.If) and any(isinstance(x, ast.Name) and x.id == n for x in ast.walk(node.test)):
                return True
            node = up.get(node)
        return False

    def _caller(self, scope: Scope, n: str) -> _Binding:
        """What the caller of ``scope``'s frame passed for its parameter ``n``."""
        frame = scope.frame
        caller = frame.f_back if frame is not None else None
        if caller is None:
            return _Binding("unknown")
        co = frame.f_code
        # without instruction positions (3.10): the call on the line named as this function
        named = {co.co_name, getattr(type(scope.local.get("self")), "__name__", None)} - {None}
        call = sa.current_call(caller, lambda c: _last_name(c.func) in named)
        cscope = Scope.of_frame(caller)
        if call is None or cscope is None:
            return _Binding("unknown")
        names = list(co.co_varnames[:co.co_argcount])
        func = self._peek_or(call.func, cscope, _UNREAD)
        extra = 0
        if isinstance(func, functools.partial):
            if n in func.keywords:
                return _Binding("partial", cscope, None, call)
            extra, func = len(func.args), func.func
        if func is not _UNREAD:
            bound_self = isinstance(func, (types.MethodType, type))
        else:
            bound_self = bool(names) and names[0] in ("self", "cls") and \
                (isinstance(call.func, ast.Attribute) or co.co_name == "__init__")
        for k in call.keywords:
            if k.arg == n:
                return _Binding("arg", cscope, k.value, call)
        if n in names:
            i = names.index(n) - (1 if bound_self else 0) - extra
            positional = []
            for a in call.args:
                if isinstance(a, ast.Starred):
                    if i >= len(positional):
                        return _Binding("unknown")
                    break
                positional.append(a)
            if 0 <= i < len(positional):
                return _Binding("arg", cscope, positional[i], call)
        for k in call.keywords:
            if k.arg is None:
                held = self._peek_or(k.value, cscope, _UNREAD)
                if held is _UNREAD or (isinstance(held, dict) and n in held) or _omegaconf(held):
                    return _Binding("kwargs", cscope, k.value, call)
        if any(isinstance(a, ast.Starred) for a in call.args) and n in names:
            return _Binding("unknown")
        name = _last_name(call.func)
        if name not in (co.co_name, getattr(type(scope.local.get("self")), "__name__", None), "__init__") and \
                not isinstance(func, (type, types.FunctionType, types.MethodType, functools.partial)):
            return _Binding("unknown")     # the caller's current call is not this function's
        return _Binding("none", cscope, None, call)

    def _partial(self, scope: Scope, call: ast.Call, n: str, links: list) -> None:
        """A keyword held by a ``functools.partial``: where the partial was made with it."""
        made = None
        if isinstance(call.func, ast.Name):
            fn = scope.fn
            assigned = sa.assignments(fn, call.func.id, before=call.lineno) if not isinstance(fn, ast.Module) else []
            where = scope
            if not assigned:
                where = self._module_scope(scope)
                assigned = sa.assignments(where.fn, call.func.id)
            stmt = assigned[-1] if assigned else None
            value = getattr(stmt, "value", None)
            if isinstance(value, ast.Call) and _last_name(value.func) == "partial":
                made = next((k.value for k in value.keywords if k.arg == n), None)
        if made is None:
            links.append(self._link("static", scope, call.func))
            return
        links.append(self._link("partial", where, made, key=n))
        self._expr(where.at(made.lineno), made, links)

    # ------------------------------------------------------------------ dicts, **kwargs
    def _key(self, scope: Scope, node: ast.AST, key: str, links: list, depth: int = 0) -> None:
        """The value ``key`` gets from the mapping ``node`` (``**node``)."""
        if depth > 6:
            links.append({"kind": "unknown", "why": "too deep"})
            return
        if isinstance(node, ast.Dict):
            for k, v in zip(node.keys, node.values):
                if isinstance(k, ast.Constant) and k.value == key:
                    return self._expr(scope.at(v.lineno), v, links)
            for k, v in zip(node.keys, node.values):
                if k is None:                                   # {**base, ...}
                    held = self._peek_or(v, scope, _UNREAD)
                    if isinstance(held, dict) and key in held:
                        return self._key(scope, v, key, links, depth + 1)
            links.append(self._link("static", scope, node))
            return
        if isinstance(node, ast.Call) and _last_name(node.func) == "dict":
            for k in node.keywords:
                if k.arg == key:
                    return self._expr(scope.at(k.value.lineno), k.value, links)
        if isinstance(node, ast.Call) and _last_name(node.func) == "vars" and len(node.args) == 1:
            ns = self._peek_or(node.args[0], scope, _UNREAD)
            if isinstance(ns, argparse.Namespace):
                return self._option(scope, node, ns, key, links)
        if isinstance(node, ast.Name) and scope.frame is not None and not isinstance(scope.fn, ast.Module) \
                and self._varkw(scope) == node.id:
            links.append(self._link("param", scope, None, line=scope.fn.lineno, name=f"**{node.id}"))
            bound = self._caller(scope, key)
            if bound.kind == "arg":
                links.append(self._link("arg", bound.scope, bound.node, param=key))
                return self._expr(bound.scope.at(bound.node.lineno), bound.node, links)
            if bound.kind == "kwargs":
                links.append(self._link("kwargs", bound.scope, bound.node, key=key))
                return self._key(bound.scope.at(bound.node.lineno), bound.node, key, links, depth + 1)
            if bound.kind == "partial":
                return self._partial(bound.scope, bound.call, key, links)
            links.append({"kind": "unknown", "why": f"**{node.id}: its caller's {key} not found"})
            return
        if isinstance(node, ast.Name) and scope.frame is not None and not isinstance(scope.fn, ast.Module):
            co = scope.frame.f_code
            if node.id in co.co_varnames[:co.co_argcount + co.co_kwonlyargcount] and \
                    not sa.assignments(scope.fn, node.id, before=node.lineno):
                bound = self._caller(scope, node.id)   # a dict passed in: the caller's dict
                if bound.kind == "arg":
                    links.append(self._link("param", scope, None, line=scope.fn.lineno, name=node.id))
                    links.append(self._link("arg", bound.scope, bound.node, param=node.id))
                    return self._key(bound.scope.at(bound.node.lineno), bound.node, key, links, depth + 1)
        if isinstance(node, ast.Name):
            write = self._dict_write(scope, node.id, key, node.lineno)
            if write is not None:
                where, value, how = write
                links.append(self._link("dict", where, None, line=value.lineno, key=key, how=how))
                if how == "update":
                    return self._key(where.at(value.lineno), value, key, links, depth + 1)
                return self._expr(where.at(value.lineno), value, links)
        held = self._peek_or(node, scope, _UNREAD)
        if _omegaconf(held):
            return self._config(scope, node, held, key, links)
        links.append(self._link("key", scope, node, key=key))   # the static chain looks for the key

    def _dict_write(self, scope: Scope, name: str, key: str, before: int):
        """(scope, value node, how) of the last statement before line ``before`` that gives the
        dict ``name`` its ``key``: its assignment (a literal holding the key), ``name[key] = v``,
        ``name.update(...)`` with it; in the function, else at module level."""
        for where in (scope, self._module_scope(scope)) if not isinstance(scope.fn, ast.Module) else (scope,):
            hits = []
            for n in sa.own_nodes(where.fn):
                if where is scope and getattr(n, "lineno", 0) >= before:
                    continue
                if isinstance(n, ast.Assign) and len(n.targets) == 1:
                    t = n.targets[0]
                    if isinstance(t, ast.Name) and t.id == name:
                        hits.append((n.lineno, n.value, "assign"))
                    elif isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id == name and \
                            isinstance(t.slice, ast.Constant) and t.slice.value == key:
                        hits.append((n.lineno, n.value, "item"))
                elif isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "update" and \
                        isinstance(n.func.value, ast.Name) and n.func.value.id == name:
                    for k in n.keywords:
                        if k.arg == key:
                            hits.append((n.lineno, k.value, "item"))
                    for a in n.args:
                        held = self._peek_or(a, where, _UNREAD)
                        if isinstance(held, dict) and key in held or isinstance(a, ast.Dict):
                            hits.append((n.lineno, a, "update"))
            hits.sort(key=lambda h: h[0])
            for _line, value, how in reversed(hits):
                if how == "assign":
                    held = self._peek_or(value, where, _UNREAD)
                    if isinstance(value, (ast.Dict, ast.Call)) and not self._holds(value, key, where):
                        continue   # made without the key; a later update gives it
                    return where, value, "update" if isinstance(value, (ast.Dict, ast.Call)) or held is _UNREAD else how
                return where, value, how
        return None

    def _holds(self, node, key, scope) -> bool:
        if isinstance(node, ast.Dict):
            return any(isinstance(k, ast.Constant) and k.value == key for k in node.keys) or None in node.keys
        if isinstance(node, ast.Call) and _last_name(node.func) == "dict":
            return any(k.arg in (key, None) for k in node.keywords) or bool(node.args)
        return True

    # ------------------------------------------------------------------ attributes, items
    def _member(self, scope: Scope, node: ast.AST, links: list) -> None:
        if isinstance(node, ast.Attribute):
            key = node.attr
        elif isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, (str, int)):
            key = node.slice.value
        else:
            links.append(self._link("static", scope, node))
            return
        try:
            obj = peek(node.value, scope)
        except Unknown:
            # `parser.parse_args().workers`: a namespace no name holds, the option by its name
            opt = self.cli.by_dest(key) if self.cli is not None and isinstance(node, ast.Attribute) and \
                isinstance(node.value, ast.Call) and _last_name(node.value.func) in ("parse_args", "parse_known_args") \
                else None
            links.append(self._option_link(scope, node, opt) if opt is not None else self._link("static", scope, node))
            return
        if isinstance(obj, argparse.Namespace):
            return self._option(scope, node, obj, key, links)
        if _omegaconf(obj):
            return self._config(scope, node, obj, key, links)
        if isinstance(obj, types.ModuleType) and isinstance(key, str):
            other = Scope.of_module(getattr(obj, "__file__", "") or "", vars(obj))
            if other is not None and str(obj.__file__).endswith(".py"):
                return self._global(other, node, key, links)
        if isinstance(key, str) and (dataclasses.is_dataclass(obj) or hasattr(type(obj), "__attrs_attrs__")) \
                and not isinstance(obj, type):
            return self._field(scope, node, obj, key, links)
        if isinstance(obj, dict):
            if isinstance(node.value, ast.Name) and isinstance(key, str):
                return self._key(scope, node.value, key, links)     # the dict's literal, its updates
            links.append(self._link("key", scope, node, key=key))
            return
        if isinstance(key, str) and hasattr(obj, "__dict__") and not isinstance(obj, type):
            return self._instance_attr(scope, node, obj, key, links)
        links.append(self._link("static", scope, node))

    def _option(self, scope: Scope, node, ns, key, links: list) -> None:
        opt = None
        if self.cli is not None:
            opt = self.cli.of_namespace(ns, key) or self.cli.matching(key, getattr(ns, key, None))
        if opt is None:
            links.append(self._link("static", scope, node))
            return
        links.append(self._option_link(scope, node, opt))

    def _option_link(self, scope: Scope, node, opt) -> dict:
        fields = opt.as_dict()
        fields["defined"] = fields.pop("where")     # add_argument's place; "where" is the read's
        return self._link("option", scope, node, **fields)

    def _config(self, scope: Scope, node, cfg, key, links: list) -> None:
        try:
            full = cfg._get_full_key(key)
        except Exception:  # noqa: BLE001
            full = str(key)
        given, value = False, None
        for tok in sys.argv[1:]:
            name, eq, val = tok.partition("=")
            if eq and not name.startswith("-") and name.lstrip("+~") == full:
                given, value = True, val
        hydra = False
        if "hydra" in sys.modules:
            try:
                from hydra.core.hydra_config import HydraConfig

                hydra = bool(HydraConfig.initialized())
            except Exception:  # noqa: BLE001
                hydra = False
        links.append(self._link("config", scope, node, key=full, leaf=str(key), given=given, value=value,
                                cli="hydra" if hydra else None))

    def _field(self, scope: Scope, node, obj, key: str, links: list) -> None:
        """A dataclass or attrs field: the option it was filled from (HfArgumentParser), its
        default in the class (where the value is the default), or the argument of the class's
        call that made it."""
        value = self._peek_or(node, scope, _UNREAD)
        opt = self.cli.matching(key, value) if self.cli is not None and value is not _UNREAD else None
        if opt is not None:
            links.append(self._link("field", scope, node, key=key, cls=type(obj).__name__))
            links.append(self._option_link(scope, node, opt))
            return
        declared = self._declared(type(obj), key)
        if declared is not None:
            cscope, stmt, default = declared
            default_value = self._peek_or(default, cscope, _UNREAD) if default is not None else _UNREAD
            if default is not None and default_value is not _UNREAD and _same(default_value, value):
                links.append(self._link("field", cscope, None, line=stmt.lineno, key=key, cls=type(obj).__name__))
                return self._expr(cscope.at(default.lineno), default, links)
        made = self._construction(type(obj), key)
        if made is not None:
            where, arg = made
            links.append(self._link("field", where, None, line=arg.lineno, key=key, cls=type(obj).__name__))
            if where.frame is None and not isinstance(where.fn, ast.Module):
                links.append(self._link("static", where, arg))
                return
            return self._expr(where.at(arg.lineno), arg, links)
        links.append(self._link("static", scope, node))

    def _declared(self, cls, key: str):
        """(module scope, the field's statement, its default expression) in ``cls`` or a base."""
        for klass in cls.__mro__:
            mod = sys.modules.get(klass.__module__)
            filename = getattr(mod, "__file__", None)
            got = sa.tree(filename) if filename else None
            if got is None:
                continue
            for c in ast.walk(got[0]):
                if not (isinstance(c, ast.ClassDef) and c.name == klass.__name__):
                    continue
                for stmt in c.body:
                    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name) and stmt.target.id == key:
                        default = stmt.value
                        if isinstance(default, ast.Call) and _last_name(default.func) in ("field", "ib", "attrib"):
                            default = next((k.value for k in default.keywords if k.arg == "default"), None)
                        return Scope(filename, got[0], None, vars(mod), vars(mod), 0), stmt, default
        return None

    def _construction(self, cls, key: str):
        """(scope, argument) of the one call of ``cls`` in the user's modules that passes ``key``."""
        hits = []
        for mod in list(sys.modules.values()):
            filename = getattr(mod, "__file__", None)
            if not filename or not filename.endswith(".py") or not self.sites.is_script_code(filename):
                continue
            got = sa.tree(filename)
            if got is None:
                continue
            up = None
            for c in ast.walk(got[0]):
                if isinstance(c, ast.Call) and _last_name(c.func) == cls.__name__:
                    arg = next((k.value for k in c.keywords if k.arg == key), None)
                    if arg is None:
                        continue
                    up = up or sa.parents(got[0])
                    fn = up.get(c)
                    while fn is not None and not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Module)):
                        fn = up.get(fn)
                    hits.append((Scope(filename, fn or got[0], None, vars(mod), vars(mod), c.lineno), arg))
        return hits[0] if len(hits) == 1 else None

    def _instance_attr(self, scope: Scope, node, obj, key: str, links: list) -> None:
        """``self.workers``: the statement of its class that sets it (``self.workers = workers``
        in ``__init__``), read in that method's frame where it is still running, else handed to
        the static chain there."""
        for klass in type(obj).__mro__:
            mod = sys.modules.get(klass.__module__)
            filename = getattr(mod, "__file__", None)
            got = sa.tree(filename) if filename else None
            if got is None:
                continue
            for c in ast.walk(got[0]):
                if not (isinstance(c, ast.ClassDef) and c.name == klass.__name__):
                    continue
                sets = []
                for fn in c.body:
                    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or not fn.args.args:
                        continue
                    me = fn.args.args[0].arg
                    for s in sa.own_nodes(fn):
                        if isinstance(s, ast.Assign) and len(s.targets) == 1 and isinstance(s.targets[0], ast.Attribute) \
                                and s.targets[0].attr == key and isinstance(s.targets[0].value, ast.Name) \
                                and s.targets[0].value.id == me:
                            sets.append((fn, s))
                if len(sets) != 1:
                    continue
                fn, stmt = sets[0]
                live = self._running(fn, filename, obj)
                where = Scope.of_frame(live) if live is not None else None
                links.append(self._link("attr", Scope(filename, fn, None, {}, vars(mod), stmt.lineno), None,
                                        line=stmt.lineno, name=f"self.{key}"))
                if where is not None:
                    return self._expr(where.at(stmt.lineno), stmt.value, links)
                made = self._constructed_with(klass, fn, stmt.value) if fn.name == "__init__" else None
                if made is not None:
                    cscope, arg = made
                    links.append(self._link("param", Scope(filename, fn, None, {}, vars(mod), fn.lineno), None,
                                            line=fn.lineno, name=stmt.value.id))
                    links.append(self._link("arg", cscope, arg, param=stmt.value.id))
                    return self._expr(cscope.at(arg.lineno), arg, links)
                # the method ran and returned: its locals are gone, the static chain follows it
                links.append(self._link("static", Scope(filename, fn, None, {}, vars(mod), stmt.lineno), stmt.value))
                return
        links.append(self._link("static", scope, node))

    def _constructed_with(self, klass, init: ast.AST, value: ast.AST):
        """(scope, argument) where ``value``, a parameter of ``klass.__init__``, was passed: the
        call of the class in a frame still running (a module's, a ``main()``'s), where its
        arguments can still be read."""
        if not isinstance(value, ast.Name):
            return None
        names = [a.arg for a in [*init.args.posonlyargs, *init.args.args]]
        if value.id not in names or value.id in [v for v in self._reassigned_in(init)]:
            return None
        index = names.index(value.id) - 1
        f = sys._getframe(1)
        while f is not None:
            if self.sites.is_script_code(f.f_code.co_filename):
                fscope = Scope.of_frame(f)
                if fscope is not None:
                    for c in sa.own_nodes(fscope.fn):
                        if not (isinstance(c, ast.Call) and _last_name(c.func) == klass.__name__):
                            continue
                        arg = next((k.value for k in c.keywords if k.arg == value.id), None)
                        if arg is None and 0 <= index < len(c.args) and \
                                not any(isinstance(a, ast.Starred) for a in c.args[:index + 1]):
                            arg = c.args[index]
                        if arg is not None and c.lineno <= f.f_lineno:
                            return fscope, arg
            f = f.f_back
        return None

    @staticmethod
    def _reassigned_in(fn: ast.AST) -> set[str]:
        return {t.id for s in sa.own_nodes(fn) if isinstance(s, ast.Assign) for t in s.targets if isinstance(t, ast.Name)}

    @staticmethod
    def _running(fn: ast.AST, filename: str, obj):
        f = sys._getframe(1)
        while f is not None:
            if f.f_code.co_filename == filename and f.f_code.co_name == fn.name and f.f_locals.get(
                    fn.args.args[0].arg) is obj:
                return f
            f = f.f_back
        return None


_UNREAD = object()


def outside(frame, dirs: tuple[str, ...]):
    """The first frame from ``frame`` up whose file is in none of ``dirs`` (advisor's, torch's)."""
    dirs = tuple(os.path.realpath(d) + os.sep for d in dirs)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith("<") and not os.path.realpath(name).startswith(dirs):
            return frame
        frame = frame.f_back
    return None


def context_call(frame, names: tuple[str, ...]) -> ast.Call | None:
    """The call that made the context manager the frame's ``with`` enters now, when it is one of
    ``names`` (``with torch.autocast(...)``, or ``with ctx:`` where the function set ``ctx =
    torch.autocast(...)``, or ``ctx = autocast(...) if args.amp else nullcontext()``)."""
    fn = sa.function_of(frame)
    if fn is None:
        return None
    line = frame.f_lineno

    def named(node) -> ast.Call | None:
        if isinstance(node, ast.Call) and _last_name(node.func) in names:
            return node
        if isinstance(node, ast.IfExp):
            return named(node.body) or named(node.orelse)
        return None

    for w in sa.own_nodes(fn):
        if not isinstance(w, (ast.With, ast.AsyncWith)) or not w.lineno <= line <= w.items[-1].context_expr.end_lineno:
            continue
        for item in w.items:
            got = named(item.context_expr)
            if got is None and isinstance(item.context_expr, ast.Name):
                assigned = sa.assignments(fn, item.context_expr.id, before=w.lineno)
                got = named(getattr(assigned[-1], "value", None)) if assigned else None
            if got is not None:
                return got
    return None


def gates(frame, line: int) -> list[tuple[ast.AST, bool]]:
    """(test, the branch taken) of each ``if`` around ``line`` in the frame's function, innermost
    first: the switches under which the call ran."""
    fn = sa.function_of(frame)
    if fn is None:
        return []
    out = []
    for n in sa.own_nodes(fn):
        if isinstance(n, ast.If) and n.lineno <= line <= (n.end_lineno or n.lineno) and n.test.end_lineno < line:
            in_body = any(s.lineno <= line <= (s.end_lineno or s.lineno) for s in n.body)
            out.append((n.test, in_body))
    return sorted(out, key=lambda t: -t[0].lineno)


def positions(frame, call: ast.Call, names: tuple[str, ...]) -> dict[str, int | None] | None:
    """{parameter: its place among the positional arguments} of the callable ``call`` calls,
    from its signature (a class's ``__init__`` without ``self``); None where it cannot be read."""
    scope = Scope.of_frame(frame)
    try:
        func = peek(call.func, scope) if scope is not None else None
        sig = inspect.signature(func)
    except (Unknown, TypeError, ValueError):
        return None
    order = [p.name for p in sig.parameters.values()
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return {n: (order.index(n) if n in order else None) for n in names}
