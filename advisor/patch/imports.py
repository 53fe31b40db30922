"""Where module-level statements go in a script: settings after its imports, ``import torch``
before its first torch import, and whether ``torch`` is bound at all."""

from __future__ import annotations

import libcst as cst

from .call_args import dotted_name


def binds_torch(module: cst.Module) -> bool:
    """Whether a top-level ``import torch`` (or ``import torch.x``) binds the name ``torch``."""
    for st in module.body:
        if not isinstance(st, cst.SimpleStatementLine):
            continue
        for small in st.body:
            if isinstance(small, cst.Import):
                for alias in small.names:
                    name = dotted_name(alias.name) or ""
                    bound = alias.asname.name.value if alias.asname and isinstance(alias.asname.name, cst.Name) else name.split(".")[0]
                    if bound == "torch" and name.split(".")[0] == "torch":
                        return True
    return False


def _is_import(st) -> bool:
    return isinstance(st, cst.SimpleStatementLine) and all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in st.body)


def _is_future(st) -> bool:
    return _is_import(st) and all(isinstance(s, cst.ImportFrom) and dotted_name(s.module) == "__future__" for s in st.body)


def _is_docstring(st) -> bool:
    return isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 and isinstance(st.body[0], cst.Expr) \
        and isinstance(st.body[0].value, (cst.SimpleString, cst.ConcatenatedString))


def settings_anchor(module: cst.Module):
    """(statement, after?) where module-level settings go: after the last top-level import
    (else after the docstring and ``__future__`` imports); None for an empty module."""
    body = list(module.body)
    if not body:
        return None
    imports = [st for st in body if _is_import(st)]
    if imports:
        return imports[-1], True
    k = 1 if _is_docstring(body[0]) else 0
    while k < len(body) and _is_future(body[k]):
        k += 1
    return (body[k - 1], True) if k else (body[0], False)


def torch_import_anchor(module: cst.Module):
    """(statement, after?) where ``import torch`` goes: before the first top-level import of
    a torch module, else where settings go; None for an empty module."""
    for st in module.body:
        if _is_import(st) and not _is_future(st):
            for s in st.body:
                mod = dotted_name(s.module) if isinstance(s, cst.ImportFrom) and s.module is not None else None
                names = [dotted_name(a.name) or "" for a in s.names] if isinstance(s, cst.Import) else []
                if (mod or "").split(".")[0] == "torch" or any(n.split(".")[0] == "torch" for n in names):
                    return st, False
    return settings_anchor(module)
