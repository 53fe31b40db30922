"""Fixes on the input pipeline: DataLoader workers and pinned memory (with the matching
``non_blocking=True`` host-to-device copies), and a larger batch."""

from __future__ import annotations

import libcst as cst

from advisor.host import usable_cpus
from advisor.runtime import samples_source

from . import knobs, provenance
from .call_args import (
    code_of,
    find_arg,
    has_double_star,
    is_literal,
    keywordize,
    last_name,
    passes_literal,
    remove_arg,
    set_arg,
    set_args,
)
from .core import (
    PatchContext,
    SkipFix,
    SourceFile,
    add_warning,
    applied,
    device_type,
    location,
)
from .placement import define_before

LR_COMMENT = "# advisor: scale the learning rate with the batch"

# DataLoader's parameters in their positional order, and each one's place
_DL_NAMES = ("dataset", "batch_size", "shuffle", "sampler", "batch_sampler", "num_workers", "collate_fn",
             "pin_memory", "drop_last", "timeout", "worker_init_fn", "multiprocessing_context", "generator")
_DL_POS = {name: i for i, name in enumerate(_DL_NAMES)}


def _dataloader_call(ctx: PatchContext, fix: dict) -> tuple[SourceFile, cst.Call]:
    f, line = ctx.site("dataloader", fix)
    calls = f.calls_at(line, lambda c: last_name(c.func) == "DataLoader")
    if not calls:
        calls = f.calls_at(line, lambda c: any(a.keyword is not None and a.keyword.value in
                                                ("batch_size", "num_workers", "pin_memory") for a in c.args))
    if not calls:
        raise SkipFix(f"no DataLoader(...) call at {location(f, line)}")
    return f, calls[0]


def _kwargs_entry(ctx: PatchContext, f: SourceFile, call: cst.Call, name: str):
    """The value ``name`` gets through the call's ``**kwargs`` when those are a dict built in
    the same function (``train_kwargs.update(cuda_kwargs)``: pytorch/examples' layout)."""
    if not has_double_star(call):
        return None
    func = f.parent.get(f.stmt_at(f.line_of(call)))
    while func is not None and not isinstance(func, (cst.FunctionDef, cst.Module)):
        func = f.parent.get(func)
    lo, hi = (f.pos[func].start.line, f.pos[func].end.line) if func is not None else (0, 10 ** 9)
    for node in f.pos:
        if isinstance(node, cst.DictElement) and isinstance(node.key, cst.SimpleString) and \
                node.key.evaluated_value == name and lo <= f.pos[node].start.line <= hi and \
                knobs.ran_at(ctx, f, node):
            return node
    return None


def _dict_entries(d: cst.Dict, items: list[tuple[str, str]]) -> cst.Dict:
    """``'key': value`` entries added to a dict literal, after its last one, where absent."""
    keys = [e.key for e in d.elements if isinstance(e, cst.DictElement) and isinstance(e.key, cst.SimpleString)]
    have = {k.evaluated_value for k in keys}
    q = keys[0].quote if keys else "'"        # the user's own quotes
    new = [cst.DictElement(key=cst.SimpleString(f"{q}{k}{q}"), value=cst.parse_expression(v))
           for k, v in items if k not in have]
    if not new:
        return d
    elements = list(d.elements)
    last = elements[-1]
    comma = last.comma if isinstance(last.comma, cst.Comma) else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    elements[-1] = last.with_changes(comma=comma)
    for k, el in enumerate(new):
        elements.append(el.with_changes(comma=comma) if k < len(new) - 1 else el)
    return d.with_changes(elements=elements)


def _on_accelerator(config: dict) -> bool:
    """Whether the run's model or inputs were on an accelerator (not the CPU)."""
    for key in ("parameters", "input"):
        device = str(((config.get(key) or {}).get("value") or {}).get("device") or "")
        if device and not device.startswith("cpu"):
            return True
    return False


def dataloader(ctx: PatchContext, fix: dict, p: dict) -> dict:
    """dataloader-workers and pin-memory: one edit of the DataLoader call, each value changed
    where the user keeps it (a flag's default, a config entry: advisor.patch.knobs)."""
    name = fix.get("intervention")
    workers = p.get("num_workers")
    if workers is None and name == "dataloader-workers":
        workers = max(2, min(8, usable_cpus()))
    # pinned host memory only feeds an accelerator, and only where the trial pinned: on a CPU
    # PyTorch warns that no accelerator is found and pins nothing
    pin = bool(p.get("pin_memory", name == "pin-memory")) and _on_accelerator(ctx.config)
    prefetch = int(p.get("prefetch_factor", 4))
    seen = ((ctx.config.get("dataloader") or {}).get("value") or {})
    try:
        f, call = _dataloader_call(ctx, fix)
    except SkipFix as e:      # made in a library (a loader factory): its arguments' sources, if the run followed them
        return _through_library(ctx, fix, e, [("num_workers", None if workers is None else str(int(workers)),
                                               seen.get("num_workers")),
                                              ("pin_memory", "True" if pin and not seen.get("pin_memory") else None,
                                               seen.get("pin_memory"))])
    here = location(f, f.line_of(call))
    edits: list[str] = []
    extra: dict = {}
    append: list[tuple[str, str, int | None]] = []
    workers_code = None if workers is None else str(int(workers))
    in_dict = None      # the dict literal the workers come from through **kwargs
    for arg, value, observed in (("num_workers", workers_code, seen.get("num_workers")),
                                 ("pin_memory", "True" if pin and not seen.get("pin_memory") else None,
                                  seen.get("pin_memory"))):
        if value is None:
            continue
        chain = provenance.chain_of(ctx, "dataloader", arg)   # as the run followed it up the stack
        found = find_arg(call, arg, _DL_POS[arg])
        entry = None if found is not None else _kwargs_entry(ctx, f, call, arg)
        expr = found[1].value if found is not None else entry.value if entry is not None else None
        if entry is not None and arg == "num_workers":
            in_dict = f.parent.get(entry)
        if expr is None and chain and chain[0].get("kind") in ("kwargs", "partial") and \
                knobs.change(ctx, f, None, value, arg, edits, extra, observed, chain):
            if arg == "num_workers":    # given through **kwargs or a partial: no name to test at the call
                workers_code = None
            continue
        if expr is None:
            append.append((arg, value, _DL_POS[arg]))
            edits.append(f"{arg}={value}")
            continue
        if arg == "num_workers" and not knobs.is_literal_value(expr):
            workers_code = code_of(expr)     # the user's expression: its new value comes from its source
        knobs.change(ctx, f, expr, value, arg, edits, extra, observed, chain)
    if workers is not None and int(workers) > 0:
        pair = _worker_pair(here, int(workers), workers_code, prefetch, pin or bool(seen.get("pin_memory")), extra)
        edits += [f"{k}={v}" for k, v in pair]
        if isinstance(in_dict, cst.Dict):
            # beside num_workers in the dict the DataLoader unpacks: where that dict is not
            # used (pytorch/examples' cuda_kwargs off the GPU) there are no workers to keep
            ctx.on_node(f, in_dict, lambda d: _dict_entries(d, pair))
        else:
            append += [(k, v, None) for k, v in pair]
    if not edits:
        raise SkipFix("; ".join(filter(None, [extra.get("warning"), "nothing to change"])))

    def edit(c: cst.Call) -> cst.Call:
        if workers is not None and int(workers) == 0:
            c = remove_arg(remove_arg(c, "persistent_workers"), "prefetch_factor")
        todo = [(k, v, pos) for k, v, pos in append
                if k not in ("persistent_workers", "prefetch_factor") or find_arg(c, k) is None]
        return set_args(c, todo)
    ctx.on_node(f, call, edit)
    if pin:
        edits += _non_blocking(ctx, fix, extra)
    return applied(here, edits, **extra)


def _worker_pair(here: str, workers: int, workers_code: str | None, prefetch: int, pinned: bool,
                 extra: dict) -> list[tuple[str, str]]:
    """persistent_workers and prefetch_factor beside a worker count (``workers_code``: the
    user's expression for it, None where it reaches the call unnamed)."""
    if workers_code is None:
        # through **kwargs or a partial: these raise where the count is 0, and no name at the
        # call says when it is
        add_warning(extra, "persistent_workers and prefetch_factor left out: the worker count reaches the "
                           f"DataLoader at {here} through arguments the call does not name")
        return []
    if workers_code == str(workers):
        pair = [("persistent_workers", "True"), ("prefetch_factor", str(prefetch))]
    else:   # a knob the user may still set to 0, where these two raise
        pair = [("persistent_workers", f"{workers_code} > 0"),
                ("prefetch_factor", f"{prefetch} if {workers_code} > 0 else None")]
    # as the trial does: persistent workers beside a pinning thread hang the script's exit
    # (benchmarks/RESULTS.md)
    return pair[1:] if pinned else pair


def _through_library(ctx: PatchContext, fix: dict, why: SkipFix, values: list[tuple[str, str | None, object]]) -> dict:
    """A DataLoader made in a library's code (a loader factory the user calls): the call cannot
    be edited, the values are changed where the run's chains end, in the user's code or on the
    command line (advisor.patch.provenance)."""
    edits: list[str] = []
    extra: dict = {}
    where = None
    for arg, value, observed in values:
        chain = provenance.chain_of(ctx, "dataloader", arg)
        if value is None or not chain:
            continue
        if knobs.change(ctx, None, None, value, arg, edits, extra, observed, chain):
            where = where or next((link["where"] for link in chain if not link.get("lib") and link.get("where")), None)
    if not edits:
        raise SkipFix("; ".join(filter(None, [str(why), extra.get("warning")])))
    add_warning(extra, f"the DataLoader is made in a library ({why}): only its arguments' sources are changed")
    return applied(where or str(why), edits, **extra)


def _is_copy(c: cst.Call) -> bool:
    return isinstance(c.func, cst.Attribute) and c.func.attr.value in ("to", "cuda")


def _non_blocking(ctx: PatchContext, fix: dict, extra: dict) -> list[str]:
    """Pinned batches only help when the copies to the device are asynchronous."""
    try:
        site = ctx.site("h2d_copy", fix, required=False)
    except SkipFix as e:
        add_warning(extra, f"{e}: add non_blocking=True to the .to(device) copies yourself")
        return []
    if site is None:
        add_warning(extra, "no host-to-device copy site was observed: add non_blocking=True to the .to(device) copies")
        return []
    f, line = site
    calls = f.calls_at(line, _is_copy)
    if not calls:
        add_warning(extra, f"no .to(...)/.cuda(...) call at {location(f, line)}: add non_blocking=True yourself")
        return []
    copies = list(calls)
    # the same copy on the neighbouring lines (inputs, then targets): make those asynchronous too
    stmt = f.stmt_at(line)
    if isinstance(stmt, cst.SimpleStatementLine):
        args_code = {code_of(c.with_changes(func=cst.Name("_"))) for c in calls}
        block = f.block_of(stmt)
        i = next(k for k, s in enumerate(block) if s is stmt)
        for step in (-1, 1):
            k = i + step
            while 0 <= k < len(block) and isinstance(block[k], cst.SimpleStatementLine):
                s = block[k]
                lo, hi = f.pos[s].start.line, f.pos[s].end.line
                same = [c for c, cs, ce in f.calls if lo <= cs and ce <= hi and _is_copy(c)
                        and code_of(c.with_changes(func=cst.Name("_"))) in args_code]
                if not same:
                    break
                copies += same
                k += step
    lines = []
    for c in copies:
        if passes_literal(c, "non_blocking", True):
            continue
        ctx.on_node(f, c, lambda n: set_arg(n, "non_blocking", "True"))
        lines.append(f.line_of(c))
    return [f"non_blocking=True at {location(f, ln)}" for ln in sorted(set(lines))]


def batch_size(ctx: PatchContext, fix: dict, p: dict) -> dict:
    factor = int(p.get("factor", 2))
    if factor < 2:
        raise SkipFix(f"batch-size factor {factor} changes nothing")
    f, call = _dataloader_call(ctx, fix)
    here = location(f, f.line_of(call))
    if (bs := find_arg(call, "batch_sampler", _DL_POS["batch_sampler"])) is not None and not is_literal(bs[1].value, None):
        raise SkipFix(f"the DataLoader at {here} uses a batch_sampler")
    found = find_arg(call, "batch_size", _DL_POS["batch_size"])
    if found is not None and is_literal(found[1].value, None):
        raise SkipFix(f"the DataLoader at {here} has batch_size=None")
    through = _batch_on_command_line(ctx, here, factor)
    if through is not None:
        return through
    if found is None:
        new_code, value = f"batch_size={factor}", cst.Integer(str(factor))
    elif isinstance(found[1].value, cst.Integer):
        value = cst.Integer(str(found[1].value.evaluated_value * factor))
        new_code = f"batch_size={value.value}"
    else:
        old = found[1].value
        simple = isinstance(old, (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.Integer)) or \
            (isinstance(old, cst.BinaryOperation) and isinstance(old.operator, (cst.Multiply, cst.FloorDivide)))
        value = cst.parse_expression(f"{code_of(old)} * {factor}" if simple else
                                     f"({code_of(old.with_changes(lpar=(), rpar=()))}) * {factor}")
        new_code = f"batch_size={code_of(value)}"
    # set_arg finds batch_size by keyword or position and replaces only its value
    ctx.on_node(f, call, lambda c: set_arg(c, "batch_size", value, _DL_POS["batch_size"]))
    stmt = f.stmt_at(f.line_of(call))
    if stmt is not None:
        def comment(s):
            lines = list(s.leading_lines)
            if any(el.comment is not None and el.comment.value == LR_COMMENT for el in lines):
                return s
            return s.with_changes(leading_lines=[*lines, cst.EmptyLine(comment=cst.Comment(LR_COMMENT))])
        ctx.on_node(f, stmt, comment)
    return applied(here, [new_code, "comment: scale the learning rate with the batch"], changes_numerics=True)


def _batch_on_command_line(ctx: PatchContext, here: str, factor: int) -> dict | None:
    """A batch size that comes from a command-line option (the run's chain: config
    ``dataloader.provenance.batch_size``): the command passes it ``factor`` times larger, given
    or not, the code is not edited. None for any other source (the call's expression is scaled)."""
    chain = provenance.chain_of(ctx, "dataloader", "batch_size")
    end = provenance.origin(chain)
    if end is None or end.get("kind") != "option":
        return None
    old = end.get("value") if end.get("given") else end.get("default")
    try:
        new = int(str(old)) * factor
    except (TypeError, ValueError):
        return None
    got = provenance.follow(ctx, chain, str(new), "batch_size")
    if got is None or not got[1].get("argv_changes"):
        return None
    edits, fields = got
    fields.pop("followed", None)
    return applied(here, [*edits, "scale the learning rate with the batch"], changes_numerics=True,
                   sources={"batch_size": fields.pop("source", [])}, **fields)


def _dataset_arg(ctx: PatchContext, fix: dict) -> tuple[SourceFile, cst.Call, str, str, bool]:
    """The DataLoader call, its dataset argument's code, and whether that is a plain name (an
    expression, `SyntheticMNIST(n, transform)`, must be evaluated once in the edit)."""
    f, call = _dataloader_call(ctx, fix)
    here = location(f, f.line_of(call))
    found = find_arg(call, "dataset", 0)
    if found is None:
        raise SkipFix(f"no dataset argument in the DataLoader call at {here}")
    value = found[1].value
    return f, call, here, code_of(value.with_changes(lpar=(), rpar=()) if hasattr(value, "lpar") else value), \
        isinstance(value, cst.Name)


def precompute_samples(ctx: PatchContext, fix: dict, p: dict) -> dict:
    """precompute-samples: the DataLoader reads a list of the dataset's samples, made once."""
    f, call, here, text, _named = _dataset_arg(ctx, fix)
    value = f"_every_sample({text})"   # an expression is evaluated once, as an argument
    for definition in samples_source.DEFINITIONS:
        define_before(ctx, f, call, definition)

    def edit(c: cst.Call) -> cst.Call:
        return set_arg(c, "dataset", value, 0)
    ctx.on_node(f, call, edit)
    return applied(here, [f"dataset={value} (samples computed once, over up to {samples_source.PROCESSES} "
                          "processes, function _every_sample at module level; keep random augmentation out of it)"],
                   warning="only for deterministic per-sample work: advisor checked that dataset[i] repeats")


# The dataset preload-dataset's edit wraps the script's in, and the sampler that hands it a
# batch's indices as one tensor on the device: both defined once, at module level, before the
# function that makes the DataLoader. A DataLoader's own sampler yields a Python int per sample
# (a list, a tensor and a pinned copy made of them, every batch: host time each step), and a
# patched script fed so ran well short of the trial, which gathers with slices of one
# permutation (docs/trials.md).
PRELOADED_CLASS = '''
class _PreloadedOnDevice(torch.utils.data.Dataset):
    """Every sample of `dataset` computed once and collated on `device`; a batch is one gather
    (added by advisor's preload-dataset fix: deterministic per-sample work only)."""

    def __init__(self, dataset, device):
        samples = torch.utils.data.default_collate(_every_sample(dataset))
        self.data = torch.utils._pytree.tree_map(lambda t: t.to(device), samples)
        self.device, self.n = torch.device(device), len(dataset)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return torch.utils._pytree.tree_map(lambda t: t[i], self.data)

    def __getitems__(self, indices):
        i = indices if isinstance(indices, torch.Tensor) else torch.as_tensor(indices)
        if self.device.type == "cuda" and i.device.type == "cpu":  # pinned: the copy does not wait
            i = i.pin_memory().to(self.device, non_blocking=True)
        return torch.utils._pytree.tree_map(lambda t: t[i], self.data)
'''.strip() + "\n"

BATCHES_CLASS = '''
class _BatchesOnDevice(torch.utils.data.Sampler):
    """DataLoader(batch_size=, shuffle=, drop_last=)'s batches as slices of one index tensor on
    `device`: the permutation drawn as its RandomSampler draws it, no Python int per sample
    (added by advisor's preload-dataset fix)."""

    def __init__(self, n, batch_size=1, shuffle=False, drop_last=False, device="cpu"):
        self.n, self.batch_size, self.shuffle, self.drop_last = n, batch_size, shuffle, drop_last
        self.device = torch.device(device)

    def __len__(self):
        return self.n // self.batch_size if self.drop_last else -(-self.n // self.batch_size)

    def __iter__(self):
        if self.shuffle:
            seed = int(torch.empty((), dtype=torch.int64).random_().item())
            order = torch.randperm(self.n, generator=torch.Generator().manual_seed(seed))
        else:
            order = torch.arange(self.n)
        if self.device.type == "cuda":
            order = order.pin_memory()
        order = order.to(self.device, non_blocking=True)
        stop = self.n - self.n % self.batch_size if self.drop_last else self.n
        for i in range(0, stop, self.batch_size):
            yield order[i:i + self.batch_size]
'''.strip() + "\n"

def _own_sampling(call: cst.Call) -> str | None:
    """What keeps the DataLoader's own sampler (the edit then leaves the sampling as it is)."""
    for name in ("sampler", "batch_sampler", "generator"):
        found = find_arg(call, name, _DL_POS[name])
        if found is not None and not is_literal(found[1].value, None):
            return f"its own {name}"
    if has_double_star(call) or any(a.star == "*" for a in call.args):
        return "arguments passed with * or **"
    return None


def _batch_sampler(c: cst.Call, n: str, device: str) -> cst.Call:
    """batch_size, shuffle and drop_last moved into a _BatchesOnDevice (the DataLoader takes a
    batch_sampler only without them)."""
    c = keywordize(c, _DL_NAMES)
    given = {}
    for name in ("batch_size", "shuffle", "drop_last"):
        found = find_arg(c, name)
        if found is not None:
            given[name] = code_of(found[1].value)
            c = remove_arg(c, name)
    size = given.pop("batch_size", "1")
    rest = "".join(f", {k}={v}" for k, v in given.items())
    return set_arg(c, "batch_sampler", f"_BatchesOnDevice(len({n}), {size}{rest}, device={device!r})")


# what a preloaded DataLoader sets itself, or must not be given with num_workers=0
_PRELOAD_KEYS = ("num_workers", "collate_fn", "pin_memory", "persistent_workers", "prefetch_factor")


def _without_loader_keys(c: cst.Call) -> cst.Call:
    """Each ``**kwargs`` of the call without the keys the preloaded loader sets: pytorch/examples'
    ``DataLoader(dataset1, **train_kwargs)`` whose dict holds num_workers would otherwise get it
    twice (TypeError), and persistent workers with none raise."""
    keys = ", ".join(repr(k) for k in _PRELOAD_KEYS)
    args = [a.with_changes(value=cst.parse_expression(
                f"{{k: v for k, v in ({code_of(a.value)}).items() if k not in ({keys})}}"))
            if a.star == "**" else a for a in c.args]
    return c.with_changes(args=args)


def preload_dataset(ctx: PatchContext, fix: dict, p: dict) -> dict:
    """preload-dataset: every sample collated once onto the device (_PreloadedOnDevice), and
    the batches drawn as the DataLoader drew them, as index tensors there (_BatchesOnDevice);
    each batch is one gather. With a sampler, batch sampler or generator of its own, the
    DataLoader keeps it and hands over each batch's indices as a list."""
    f, call, here, text, named = _dataset_arg(ctx, fix)
    if find_arg(call, "collate_fn", _DL_POS["collate_fn"]) is not None:
        raise SkipFix(f"the DataLoader at {here} has its own collate_fn")
    device = device_type(ctx, p)
    keeps = _own_sampling(call)
    for cls in [*samples_source.DEFINITIONS, PRELOADED_CLASS, *([] if keeps else [BATCHES_CLASS])]:
        define_before(ctx, f, call, cls)

    # an expression is evaluated once, bound where the sampler that follows can count it
    preloaded = f"_PreloadedOnDevice({text}, {device!r})" if named or keeps else \
        f"(_preloaded := _PreloadedOnDevice({text}, {device!r}))"
    counted = text if named else "_preloaded"

    def edit(c: cst.Call) -> cst.Call:
        c = remove_arg(remove_arg(c, "persistent_workers"), "prefetch_factor")
        c = _without_loader_keys(c)
        if not keeps:
            c = _batch_sampler(c, counted, device)
        c = set_arg(c, "dataset", preloaded, 0)
        return set_args(c, [("num_workers", "0", _DL_POS["num_workers"]), ("collate_fn", "lambda batch: batch", _DL_POS["collate_fn"]),
                            ("pin_memory", "False", _DL_POS["pin_memory"])])
    ctx.on_node(f, call, edit, late=True)  # after a batch-size edit of the same call: it moves that value
    sampling = (f"the DataLoader keeps {keeps}; each batch's indices are handed over as a list" if keeps else
                f"batch_sampler=_BatchesOnDevice(len({counted}), ...): the DataLoader's batch size, shuffle and "
                "drop_last, each batch a slice of one index tensor on the device (class at module level)")
    return applied(here, [f"{text} collated once onto {device} (class _PreloadedOnDevice, at module level)",
                          f"DataLoader(_PreloadedOnDevice({text}, {device!r}), ..., collate_fn=lambda batch: batch, "
                          "num_workers=0, pin_memory=False)", sampling],
                   warning="only for deterministic per-sample work that fits in device memory: advisor checked that dataset[i] repeats")
