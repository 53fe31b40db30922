"""Reading and editing a call's arguments (and the dotted names around them) on libcst nodes.

Edits keep the call's layout: replaced arguments stay where they were, new keyword arguments
follow the existing ones on the same line or one per line, and comments stay on their lines.
"""

from __future__ import annotations

import libcst as cst


def code_of(node) -> str:
    return cst.Module(body=[]).code_for_node(node)


def dotted_name(expr) -> str | None:
    """``a.b.c`` for a chain of names and attributes, else None."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        base = dotted_name(expr.value)
        return f"{base}.{expr.attr.value}" if base else None
    return None


def last_name(expr) -> str | None:
    """The last component of a name or attribute: ``c`` of ``a.b.c``."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        return expr.attr.value
    return None


def is_literal(expr, value: bool | None) -> bool:
    """Whether ``expr`` is the literal ``True``, ``False`` or ``None``."""
    return isinstance(expr, cst.Name) and expr.value == repr(value)


def positional_args(call: cst.Call) -> list[tuple[int, cst.Arg | None]]:
    out = []
    for i, a in enumerate(call.args):
        if a.keyword is not None or a.star == "**":
            break
        if a.star == "*":
            return out + [(i, None)]          # positions after *args are unknown
        out.append((i, a))
    return out


def find_arg(call: cst.Call, name: str, pos: int | None = None) -> tuple[int, cst.Arg] | None:
    """(index, argument) of ``name=`` or, with ``pos``, of the positional argument in that place."""
    for i, a in enumerate(call.args):
        if a.keyword is not None and a.keyword.value == name:
            return i, a
    if pos is not None:
        positional = positional_args(call)
        if len(positional) > pos and positional[pos][1] is not None:
            return positional[pos]
    return None


def passes_literal(call: cst.Call, name: str, value: bool | None, pos: int | None = None) -> bool:
    found = find_arg(call, name, pos)
    return found is not None and is_literal(found[1].value, value)


def has_double_star(call: cst.Call) -> bool:
    return any(a.star == "**" for a in call.args)


def _clean_ws(ws):
    """A copy of a comma's whitespace without any comment or blank lines it carried."""
    if isinstance(ws, cst.ParenthesizedWhitespace):
        return cst.ParenthesizedWhitespace(first_line=cst.TrailingWhitespace(), empty_lines=(),
                                           indent=ws.indent, last_line=ws.last_line)
    return cst.SimpleWhitespace(" ")


def _kwarg(name: str, value: cst.BaseExpression) -> cst.Arg:
    return cst.Arg(keyword=cst.Name(name), value=value,
                   equal=cst.AssignEqual(whitespace_before=cst.SimpleWhitespace(""),
                                         whitespace_after=cst.SimpleWhitespace("")))


def _append_args(call: cst.Call, new: list[cst.Arg]) -> cst.Call:
    """Append keyword arguments, following the call's layout; comments stay on their lines."""
    if not new:
        return call
    args = list(call.args)
    if not args:
        return call.with_changes(args=[a.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
                                       for a in new[:-1]] + [new[-1]])
    last = args[-1]
    trailing, tail_ws = last.comma, last.whitespace_after_arg
    commas = [a.comma for a in args[:-1] if isinstance(a.comma, cst.Comma)]
    inline = cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    line_ws = commas[-1].whitespace_after if commas else call.whitespace_before_args
    if isinstance(trailing, cst.Comma) and isinstance(trailing.whitespace_after, cst.ParenthesizedWhitespace) \
            and isinstance(line_ws, cst.ParenthesizedWhitespace):
        # one argument per line with a trailing comma: each new argument on its own line; the old
        # last argument keeps its end-of-line comment, the new last one gets a clean trailing comma
        t, ws = trailing.whitespace_after, _clean_ws(line_ws)
        first_sep = trailing.with_changes(whitespace_after=cst.ParenthesizedWhitespace(
            first_line=t.first_line, empty_lines=t.empty_lines, indent=ws.indent, last_line=ws.last_line))
        sep = cst.Comma(whitespace_after=ws)
        final = cst.Comma(whitespace_after=cst.ParenthesizedWhitespace(
            first_line=cst.TrailingWhitespace(), empty_lines=(), indent=t.indent, last_line=t.last_line))
    else:
        sep, final = inline, trailing
        broken = [c for c in commas if isinstance(c.whitespace_after, cst.ParenthesizedWhitespace)]
        # a call already wrapped over lines: start the new arguments on a continuation line
        first_sep = cst.Comma(whitespace_after=_clean_ws(broken[-1].whitespace_after)) if broken else inline
    args[-1] = last.with_changes(comma=first_sep, whitespace_after_arg=cst.SimpleWhitespace(""))
    for k, a in enumerate(new):
        is_last = k == len(new) - 1
        args.append(a.with_changes(comma=final if is_last else sep,
                                   whitespace_after_arg=tail_ws if is_last else cst.SimpleWhitespace("")))
    return call.with_changes(args=args)


def set_arg(call: cst.Call, name: str, value: str | cst.BaseExpression, pos: int | None = None) -> cst.Call:
    """``name=value``: the existing argument (keyword, or positional at ``pos``) replaced, else appended."""
    expr = cst.parse_expression(value) if isinstance(value, str) else value
    found = find_arg(call, name, pos)
    if found is not None:
        i, a = found
        args = list(call.args)
        args[i] = a.with_changes(value=expr)
        return call.with_changes(args=args)
    return _append_args(call, [_kwarg(name, expr)])


def set_args(call: cst.Call, items: list[tuple[str, str, int | None]]) -> cst.Call:
    """Several ``name=value`` at once: existing ones replaced in place, the rest appended together."""
    missing = []
    for name, value, pos in items:
        if find_arg(call, name, pos) is not None:
            call = set_arg(call, name, value, pos)
        else:
            missing.append(_kwarg(name, cst.parse_expression(value)))
    return _append_args(call, missing)


def remove_arg(call: cst.Call, name: str) -> cst.Call:
    """``name=`` taken out; a line break after it stays, after the argument before it."""
    args = list(call.args)
    for i, a in enumerate(args):
        if a.keyword is not None and a.keyword.value == name:
            breaks = isinstance(a.comma, cst.Comma) and isinstance(a.comma.whitespace_after, cst.ParenthesizedWhitespace)
            if i > 0 and (i == len(args) - 1 or breaks):
                args[i - 1] = args[i - 1].with_changes(comma=a.comma)
            del args[i]
            return call.with_changes(args=args)
    return call


def keywordize(call: cst.Call, names: tuple[str, ...], keep: int = 1) -> cst.Call:
    """Positional arguments from place ``keep`` on written as ``name=value`` (``names`` are the
    callee's parameters in order), so that any of them can then be removed or moved."""
    positional = positional_args(call)
    if any(a is None for _, a in positional) or len(positional) > len(names):
        return call                      # *args, or more than we can name: left as they are
    args = list(call.args)
    for i, a in positional[keep:]:
        args[i] = a.with_changes(keyword=cst.Name(names[i]), equal=cst.AssignEqual(
            whitespace_before=cst.SimpleWhitespace(""), whitespace_after=cst.SimpleWhitespace("")))
    return call.with_changes(args=args)


def rename_arg(call: cst.Call, old: str, new: str, value: str) -> cst.Call:
    args = list(call.args)
    for i, a in enumerate(args):
        if a.keyword is not None and a.keyword.value == old:
            args[i] = a.with_changes(keyword=cst.Name(new), value=cst.parse_expression(value))
            return call.with_changes(args=args)
    return call
