"""How many epochs the script will train: the ``range(...)`` of the loop around the training
loop, read when the training loader gives its first batch (config ``epochs``). With the loader's
length it gives the run's length in steps (advisor.payback), so a fix's one-off cost can be set
against the run the user will actually do.

Only a plain shape counts: the user's ``for batch in loader`` (through enumerate, tqdm, ...)
nested, in the same function or through the calls above it, in ``for epoch in range(...)``
(``trange(...)``, ``tqdm(range(...))``). A ``break`` in either loop that could run (a step
count reached: ``if step >= args.steps: break``) can only end the run sooner: the count is then
the most it can be (``at_most``), which still tells a one-off cost that the whole count does not
pay back. A ``break`` under a switch that is off (``if args.dry_run: break``, the switch a name
or attribute the loop does not set) cannot run. The range's bounds and the switches are read
from the frame that runs the loop (names, attributes, subscripts by a constant, arithmetic):
nothing is called. Anything else gives no count.

Under a framework's own loop (Hugging Face ``Trainer``, Lightning's ``Trainer``) the framework
has worked the run's length out itself: ``framework_steps`` reads it from the running trainer.
"""

from __future__ import annotations

import ast
import linecache
import operator
import sys

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv}
_RANGE_WRAPPERS = ("tqdm", "enumerate", "list", "iter")   # wrap a range without changing its length

_trees: dict[str, ast.AST | None] = {}


def _tree(filename: str):
    if filename not in _trees:
        try:
            _trees[filename] = ast.parse("".join(linecache.getlines(filename)))
        except (SyntaxError, ValueError):
            _trees[filename] = None
    return _trees[filename]


def _loops_around(tree, line: int) -> list[ast.For]:
    """The ``for`` statements whose span holds ``line``, innermost first; a function defined
    inside a loop ends the search (its body runs when called, not in that loop)."""
    found: list[ast.For] = []

    def visit(node, inside: list[ast.For]) -> None:
        for child in ast.iter_child_nodes(node):
            start, end = getattr(child, "lineno", None), getattr(child, "end_lineno", None)
            if start is None or not (start <= line <= end):
                continue
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                found[:] = []
                visit(child, [])
                return
            here = [child, *inside] if isinstance(child, (ast.For, ast.AsyncFor)) else inside
            found[:] = here
            visit(child, here)
            return

    visit(tree, [])
    return found


def _value(node, frame):
    """An expression's value in ``frame`` if it only reads names, attributes, constant subscripts
    and integer arithmetic; raises otherwise."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name):
        for ns in (frame.f_locals, frame.f_globals):
            if node.id in ns:
                return ns[node.id]
        raise LookupError(node.id)
    if isinstance(node, ast.Attribute):
        return getattr(_value(node.value, frame), node.attr)
    if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
        return _value(node.value, frame)[node.slice.value]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_value(node.left, frame), _value(node.right, frame))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, frame)
    raise ValueError(ast.dump(node))


def _range_call(node):
    """The ``range(...)``/``trange(...)`` call a loop iterates, through wrappers that keep its
    length; None for any other iterable."""
    while isinstance(node, ast.Call):
        name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
        if name in ("range", "trange"):
            return node
        if name not in _RANGE_WRAPPERS or not node.args:
            return None
        node = node.args[0]
    return None


def _count(call: ast.Call, frame) -> int | None:
    try:
        bounds = [int(_value(a, frame)) for a in call.args]
        return len(range(*bounds)) if 1 <= len(bounds) <= 3 else None
    except Exception:  # noqa: BLE001 - a bound advisor cannot read gives no count
        return None


def _bound_in(loop) -> set[str]:
    """The names the loop sets: its target and whatever its body assigns."""
    names = {n.id for n in ast.walk(loop.target) if isinstance(n, ast.Name)}
    for node in ast.walk(loop):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return names


def _switch_off(test, frame, bound: set[str]) -> bool:
    """Whether an ``if`` test is a switch the loop leaves alone (a name or attribute chain whose
    root the loop does not set) and is off now; a switch cannot change between batches."""
    root = test
    while isinstance(root, ast.Attribute):
        root = root.value
    if not isinstance(root, ast.Name) or root.id in bound:
        return False
    try:
        return not _value(test, frame)
    except Exception:  # noqa: BLE001 - a switch advisor cannot read may be on
        return False


def _breaks(loop, frame=None) -> bool:
    """Whether the loop's own body (not a nested loop's or function's) holds a ``break`` that
    could run: one under a switch that is off in ``frame`` cannot."""
    bound = _bound_in(loop)
    stack = list(loop.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Break):
            return True
        if isinstance(node, (ast.For, ast.AsyncFor, ast.While, ast.FunctionDef, ast.AsyncFunctionDef,
                             ast.Lambda, ast.ClassDef)):
            continue
        if isinstance(node, ast.If) and frame is not None and _switch_off(node.test, frame, bound):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))
    return False


def epoch_loop(sites) -> dict | None:
    """{"epochs", "expr", "where"} for the loop around the training loop now drawing a batch,
    and "at_most": True where a ``break`` may end it sooner; None when the shape is not the
    plain one above. ``sites``: the runner's SiteFinder."""
    frame = sites.user_frame(2, script_only=True)
    if frame is None:
        return None
    tree = _tree(frame.f_code.co_filename)
    loops = _loops_around(tree, frame.f_lineno) if tree is not None else []
    batch_loop = next((lp for lp in loops if lp.lineno == frame.f_lineno or lp.iter.lineno <= frame.f_lineno
                       <= lp.iter.end_lineno), None)
    if batch_loop is None:   # next(it) by hand
        return None
    sooner = _breaks(batch_loop, frame)   # the run may end before its last epoch's last batch
    outer = loops[loops.index(batch_loop) + 1:]
    while frame is not None:
        for loop in outer:
            call = _range_call(loop.iter)
            if call is not None:
                n = _count(call, frame)
                if n is None:
                    return None
                where = f"{sites.display(frame.f_code.co_filename)}:{loop.lineno}"
                out = {"epochs": n, "expr": ast.unparse(loop.iter), "where": where}
                return {**out, "at_most": True} if sooner or _breaks(loop, frame) else out
            sooner = sooner or _breaks(loop, frame)   # a loop between them that may end it
        frame = frame.f_back
        while frame is not None and not sites.is_script_code(frame.f_code.co_filename):
            frame = frame.f_back
        if frame is None:
            return None
        tree = _tree(frame.f_code.co_filename)
        outer = _loops_around(tree, frame.f_lineno) if tree is not None else []
    return None


def framework_steps() -> dict | None:
    """{"steps", "expr", "where"}: the optimizer steps a framework's trainer has set its run to,
    read from the trainer whose loop is drawing the batch; None outside one, or when it trains
    until stopped."""
    frame = sys._getframe(1)
    while frame is not None:
        owner = frame.f_locals.get("self")
        if frame.f_code.co_name == "_inner_training_loop" and "transformers.Trainer" in _kinds(owner):
            steps, args = frame.f_locals.get("max_steps"), frame.f_locals.get("args")
            expr = (f"max_steps {args.max_steps}" if (getattr(args, "max_steps", 0) or 0) > 0
                    else f"{frame.f_locals.get('num_train_epochs')} epochs")
            return _steps(steps, expr, "transformers Trainer")
        trainer = owner.__dict__.get("trainer") if hasattr(owner, "__dict__") else None
        if {"lightning.Trainer", "pytorch_lightning.Trainer"} & _kinds(trainer):
            try:
                expr = (f"max_steps {trainer.max_steps}" if (trainer.max_steps or -1) > 0
                        else f"{trainer.max_epochs} epochs × {trainer.num_training_batches} batches")
                return _steps(trainer.estimated_stepping_batches, expr, "Lightning Trainer")
            except Exception:  # noqa: BLE001 - a trainer not set up to say: no length
                return None
        frame = frame.f_back
    return None


def _kinds(obj) -> set[str]:
    """The classes of obj as "package.Class" (transformers.Trainer), its bases included."""
    return {f"{c.__module__.split('.')[0]}.{c.__name__}" for c in type(obj).__mro__}


def _steps(steps, expr: str, where: str) -> dict | None:
    if not isinstance(steps, (int, float)) or not 0 < steps < float("inf"):
        return None
    return {"steps": int(steps), "expr": expr, "where": where}
