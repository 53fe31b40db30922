"""Observed configuration (with call sites), environment and memory for child.json."""

from __future__ import annotations

import functools
import os
import warnings
import weakref
from collections.abc import Mapping

import torch

from advisor.runner import dali_use, environment, hf_models, linears, loaders, logits, placement
from advisor.runner._util import Patcher
from advisor.runner.placement import memory_format_of
from advisor.runtime import provenance
from advisor.runtime.capture import capturing
from advisor.runtime.cli_seen import CliSeen
from advisor.runtime.sites import ADVISOR_DIR, SiteFinder

TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__))

_BACKEND_KEYS = ("cudnn.benchmark", "cudnn.deterministic", "tf32.matmul", "tf32.cudnn",
                 "float32_matmul_precision", "deterministic_algorithms")
_CUDNN_ATTRS = {"benchmark": "cudnn.benchmark", "deterministic": "cudnn.deterministic",
                "allow_tf32": "tf32.cudnn", "fp32_precision": "tf32.cudnn"}
_CUBLAS_ATTRS = {"allow_tf32": "tf32.matmul", "fp32_precision": "tf32.matmul"}

# The DataLoader arguments whose source a fix changes (loader_fixes), with their positions in
# DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, num_workers, collate_fn, pin_memory)
_LOADER_ARGS = {"num_workers": 5, "batch_size": 1, "pin_memory": 7, "persistent_workers": None,
                "prefetch_factor": None}
_MAX_FOLLOWED = 8     # loaders whose arguments are followed up the stack (each costs a walk)


def _loader_call(call) -> bool:
    """Which call on the line makes the loader, where Python gives no instruction positions
    (3.10): one named like a loader, or passing a loader's arguments."""
    func = getattr(call.func, "attr", None) or getattr(call.func, "id", "") or ""
    return "Loader" in func or any(k.arg in _LOADER_ARGS for k in call.keywords)


def dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def first_tensor(obj, _depth: int = 0):
    """The first tensor in a batch (tensor, list/tuple, dict, dataclass-like), or None."""
    if isinstance(obj, torch.Tensor):
        return obj
    if _depth > 4:
        return None
    if isinstance(obj, (list, tuple)):
        for v in obj:
            t = first_tensor(v, _depth + 1)
            if t is not None:
                return t
    elif isinstance(obj, Mapping):  # dict, HF BatchEncoding (a UserDict), ...
        for v in obj.values():
            t = first_tensor(v, _depth + 1)
            if t is not None:
                return t
    return None


class Observer:
    def __init__(self, ctl):
        self.ctl = ctl
        self.sites = SiteFinder(ctl.run.cwd, extra_skip=(TORCH_DIR,))
        self.config: dict = {}
        self.patches = Patcher()
        self._backend_sites: dict = {}
        self._config_files: dict[str, str | None] = {}   # YAML files the script read → where
        self._backend_values: dict | None = None
        self._loaders: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._first_loader = None
        self._optims: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._autocast_done = False
        self.want_forward = True      # record input/parameters at the next outermost forward
        self.checkpoint_calls = 0     # torch.utils.checkpoint calls so far (_patch_checkpoint)
        self._h2d_loop = None
        self._h2d_pre = None
        self._zero_grad_seen = False
        self._items_seen = 0
        self._gpu = None
        self._attention_model = None   # weakref to a Hugging Face model (attention, config_doc)
        self.placements = placement.Placements(self.sites, self._safe, lambda: self.want_forward)
        self.cli = CliSeen(self.sites)          # the script's argparse options, as this run gave them
        self.walker = provenance.Walker(self.sites, self.cli)
        self._followed = 0

    # ------------------------------------------------------------------ helpers
    def site(self):
        try:
            return self.sites.site()
        except Exception:
            return None

    def _safe(self, what: str, fn, *a) -> None:
        try:
            fn(*a)
        except Exception as e:
            self.ctl.internal_error(what, e)

    def _wrap_init(self, cls, what: str, record):
        orig = cls.__init__

        @functools.wraps(orig)
        def __init__(obj, *a, **k):
            orig(obj, *a, **k)
            self._safe(what, record, obj)

        self.patches.set(cls, "__init__", __init__)

    # ------------------------------------------------------------------ install
    def install(self) -> None:
        from torch.utils.data import DataLoader

        self._wrap_init(DataLoader, "DataLoader observation", self._record_loader)
        self._wrap_init(torch.optim.Optimizer, "optimizer observation", self._record_optimizer)
        try:
            from torch.amp.grad_scaler import GradScaler

            self._wrap_init(GradScaler, "GradScaler observation", self._record_scaler)
        except Exception:
            pass
        for cls in (torch.nn.parallel.DataParallel, torch.nn.parallel.DistributedDataParallel):
            self._wrap_init(cls, "data-parallel observation", self._record_dp)
        self._patch_backends()
        self._patch_autocast()
        self._patch_checkpoint()
        self._patch_open()
        self._safe("command-line observation", self.cli.install, self.patches)
        self._watch_first_model()
        self.placements.install(self.patches)
        self._start_gpu_query()

    def uninstall(self) -> None:
        self.patches.undo()

    def _patch_open(self) -> None:
        """The YAML files the script reads (config ``config_files``): a fix's value kept in a
        config file is changed in the file this run opened, not in a default it never read."""
        import builtins
        import io

        obs, orig = self, builtins.open

        @functools.wraps(orig)
        def open_(file, mode="r", *a, **k):
            handle = orig(file, mode, *a, **k)
            try:
                if isinstance(file, (str, os.PathLike)) and "r" in str(mode) and \
                        os.fspath(file).endswith((".yaml", ".yml")):
                    obs._config_files.setdefault(os.path.realpath(os.fspath(file)), obs.site())
            except Exception:  # noqa: BLE001 - an observation never breaks the script
                pass
            return handle

        self.patches.set(builtins, "open", open_)
        self.patches.set(io, "open", open_)

    def _watch_first_model(self) -> None:
        """config ``first_model``: the first module with parameters called outside the data
        pipeline, the module the torch-compile trial compiles (advisor.interventions.compile's
        rule). A script with several models (a GAN's discriminator, then its generator) gets its
        compile edit on that one, so the patch ships what the trial measured; ``model`` is the
        one the profiled step called first."""
        from advisor.runtime.patching import in_loading

        obs, original = self, torch.nn.Module.__call__

        compiling = torch.compiler.is_compiling

        def call(module, *a, **k):
            # traced by torch.compile first: no state read, no class attribute set (either would
            # add a guard, and a graph the script without advisor does not have)
            if not compiling() and not in_loading() and any(True for _ in module.parameters()):
                torch.nn.Module.__call__ = original     # one look: no cost on later calls
                obs._safe("first model observation",
                          lambda: obs.config.__setitem__("first_model", obs.placements.entry(module)))
            return original(module, *a, **k)

        self.patches.set(torch.nn.Module, "__call__", call)

    # ------------------------------------------------------------------ records
    def _set(self, key: str, value, where=None) -> None:
        self.config[key] = {"value": value, "where": where if where is not None else self.site()}

    def _record_loader(self, loader) -> None:
        entry = {"value": loaders.loader_value(loader), "where": self._loader_site()}
        if self._followed < _MAX_FOLLOWED:
            self._followed += 1
            chains = self._follow_call(_loader_call, _LOADER_ARGS)
            if chains:
                entry["provenance"] = chains
        self._loaders[loader] = entry
        if self._first_loader is None:
            self._first_loader = entry

    def _follow_call(self, want, args: dict) -> dict:
        """{argument: where its value comes from} for the call the nearest frame outside advisor
        and torch is making (advisor.runtime.provenance: the live stack, frame by frame)."""
        import sys

        from advisor.runtime import source_ast

        frame = provenance.outside(sys._getframe(1), (ADVISOR_DIR, TORCH_DIR))
        call = source_ast.current_call(frame, want) if frame is not None else None
        if call is None:
            return {}
        return self.walker.at_call(frame, call, args)

    def _loader_site(self) -> str | None:
        """Where the DataLoader was made: the nearest frame outside torch, or past an installed
        framework's to the user's own line when that line makes it (Lightning wraps
        DataLoader.__init__ while the user's train_dataloader() runs; a Trainer that makes its
        own loader, transformers', keeps its site)."""
        near = self.site()
        mine = self.sites.script_site()
        if mine and mine != near:
            import linecache

            path, _, line = mine.rpartition(":")
            full = path if os.path.isabs(path) else os.path.join(self.sites.cwd, path)
            if "DataLoader" in linecache.getline(full, int(line)):
                return mine
        return near

    def on_first_batch(self, it, loop: dict | None = None) -> None:
        """The first batch came out of iterator `it`: its loader is the training loader, and
        ``loop`` (runner.epochs) the epoch loop around the loop drawing from it, or the steps a
        framework's trainer will run."""
        self.config.pop("epochs", None)
        self.config.pop("run_steps", None)
        if loop is not None and "steps" in loop:
            self._set("run_steps", {"steps": loop["steps"], "expr": loop["expr"]}, loop["where"])
        elif loop is not None:
            self._set("epochs", {k: loop[k] for k in ("epochs", "expr", "at_most") if k in loop}, loop["where"])
        ds = getattr(it, "_dataset", None)
        for loader, entry in list(self._loaders.items()):
            if loader.dataset is ds:
                self.config["dataloader"] = entry
                return
        if self._first_loader is not None:
            self.config["dataloader"] = self._first_loader

    def _record_optimizer(self, opt) -> None:
        lr = opt.param_groups[0].get("lr") if opt.param_groups else opt.defaults.get("lr")
        try:
            lr = float(lr) if lr is not None else None
        except Exception:
            lr = None
        value = {"class": type(opt).__name__, "foreach": opt.defaults.get("foreach"),
                 "fused": opt.defaults.get("fused"), "lr": lr}
        entry = {"value": value, "where": self.site()}
        self._optims[opt] = entry
        self.config.setdefault("optimizer", entry)
        self.ctl.optimizer_made()

    def anchor_optimizer(self, opt) -> None:
        entry = self._optims.get(opt)
        if entry is not None:
            self.config["optimizer"] = entry

    def _record_scaler(self, scaler) -> None:
        self._set("grad_scaler", {"enabled": bool(getattr(scaler, "_enabled", False))})

    def _record_dp(self, module) -> None:
        self._set("data_parallel", {"class": type(module).__name__})

    def on_outer_forward(self, module, args) -> None:
        params = list(module.parameters())
        if not params:
            return  # a loss module or a parameter-free wrapper: keep looking
        self.want_forward = False
        where = self.site()
        self.config["model"] = self.placements.entry(module)
        t = first_tensor(args)
        if t is not None:
            self.config["input"] = {"value": {"dtype": dtype_name(t.dtype), "shape": list(t.shape),
                                              "memory_format": memory_format_of(t),
                                              "device": str(t.device)}, "where": where}
        conv_fmt = None
        for m in module.modules():
            if isinstance(m, torch.nn.modules.conv._ConvNd) and getattr(m, "weight", None) is not None \
                    and m.weight.dim() >= 4:
                conv_fmt = memory_format_of(m.weight)
                break
        # the output layer's logits over a large vocabulary, at its first call (ADV125)
        self._safe("logits observation", logits.watch, module, lambda v: self._logits(v, where))
        # its linear layers and their GEMMs (float8-training's check: torchao's swapped layers)
        self._safe("linear layers observation", linears.watch, module, lambda v: self._set("linears", v, where))
        attention = hf_models.attention_of(module)
        if attention is not None:   # a Hugging Face model: the attention its config selects
            self.config["attention"] = {"value": attention, "where": where}
            self._attention_model = weakref.ref(module)   # read again at the end (config_doc)
        self.config["parameters"] = {"value": {
            "dtype": dtype_name(params[0].dtype), "conv_memory_format": conv_fmt,
            "count": int(sum(p.numel() for p in params)), "device": str(params[0].device)},
            "where": where}

    def _logits(self, value: dict, where) -> None:
        self._set("logits", value, where)
        shape = value.get("shape") or []
        if len(shape) == 3:   # [batch, positions, vocab]: a model called with keywords alone
            self.ctl.seen.saw_batch(int(shape[0]), "logits")   # (model(input_ids=x)) shows its batch here

    def on_h2d(self, tensor, non_blocking: bool, in_loop: bool) -> bool:
        """Record an h2d copy made by user code. Returns True once nothing more is needed."""
        try:
            pinned = bool(tensor.is_pinned())
        except Exception:
            pinned = False
        entry = {"value": {"non_blocking": bool(non_blocking), "pinned_source": pinned},
                 "where": self.site()}
        if in_loop:
            self._h2d_loop = entry
            self.config["h2d_copy"] = entry
            return True
        if self._h2d_pre is None:
            self._h2d_pre = entry
            self.config["h2d_copy"] = entry
        return False

    def on_item(self, caller, step: int, on_device: bool) -> None:
        """An ``.item()`` called by the script's own code (not torch's GradScaler, not an
        installed trainer: defer-syncs would not defer those), counted per call site, with
        the steps they span for a per-step figure; a site is a sync when it read a device
        tensor."""
        if self._items_seen >= 1000 or not self.sites.is_script_code(caller.f_code.co_filename):
            return
        self._items_seen += 1
        where = self.sites.where(caller)
        entry = self.config.setdefault("item_calls", {"value": {"sites": {}, "first_step": step, "last_step": step},
                                                      "where": where})
        v = entry["value"]
        site = v["sites"].setdefault(where, {"calls": 0, "device": False})
        site["calls"] += 1
        site["device"] = site["device"] or on_device
        v["last_step"] = step

    def on_zero_grad(self, set_to_none) -> None:
        if not self._zero_grad_seen:
            self._zero_grad_seen = True
            self._set("zero_grad", {"set_to_none": bool(set_to_none)})

    # ------------------------------------------------------------------ backends, autocast
    def _patch_backends(self) -> None:
        obs = self

        def note_site(key):
            where = obs.site()
            if where is not None:
                obs._backend_sites[key] = where

        try:
            from torch.backends.cudnn import CudnnModule  # type: ignore[attr-defined]
        except Exception:
            CudnnModule = type(torch.backends.cudnn)
        orig_cudnn = CudnnModule.__setattr__

        def cudnn_setattr(mod, name, value):
            key = _CUDNN_ATTRS.get(name)
            if key is not None:
                note_site(key)
            return orig_cudnn(mod, name, value)

        self.patches.set(CudnnModule, "__setattr__", cudnn_setattr)

        try:
            cublas_cls = type(torch.backends.cuda.matmul)
            orig_cublas = cublas_cls.__setattr__

            def cublas_setattr(mod, name, value):
                key = _CUBLAS_ATTRS.get(name)
                if key is not None:
                    note_site(key)
                return orig_cublas(mod, name, value)

            self.patches.set(cublas_cls, "__setattr__", cublas_setattr)
        except Exception:
            pass

        try:
            from torch.backends import _FP32Precision  # type: ignore[attr-defined]

            orig_fp32 = _FP32Precision.__setattr__

            def fp32_setattr(obj, name, value):
                if name == "fp32_precision" and getattr(obj, "backend", None) == "cuda":
                    op = getattr(obj, "op", None)
                    if op in ("conv", "rnn"):
                        note_site("tf32.cudnn")
                    elif op == "matmul":
                        note_site("tf32.matmul")
                return orig_fp32(obj, name, value)

            self.patches.set(_FP32Precision, "__setattr__", fp32_setattr)
        except Exception:
            pass

        orig_det = torch.use_deterministic_algorithms

        @functools.wraps(orig_det)
        def use_deterministic_algorithms(*a, **k):
            # the user's reproducibility choice, with its place (Fix.overrides reads it)
            note_site("deterministic_algorithms")
            return orig_det(*a, **k)

        self.patches.set(torch, "use_deterministic_algorithms", use_deterministic_algorithms)

        orig_prec = torch.set_float32_matmul_precision

        @functools.wraps(orig_prec)
        def set_float32_matmul_precision(precision):
            where = obs.site()
            if where is not None:
                obs._backend_sites["float32_matmul_precision"] = where
                obs._backend_sites.setdefault("tf32.matmul", where)
            return orig_prec(precision)

        self.patches.set(torch, "set_float32_matmul_precision", set_float32_matmul_precision)

    def _patch_checkpoint(self) -> None:
        """Activation checkpointing as the steps run it: calls of torch.utils.checkpoint's
        checkpoint (a Hugging Face model's gradient checkpointing calls it too, bound when it is
        switched on, after this), counted (the activation-checkpointing fix's check)."""
        import torch.utils.checkpoint as cp

        orig, obs = cp.checkpoint, self

        @functools.wraps(orig)
        def checkpoint(*a, **k):
            obs.checkpoint_calls += 1
            return orig(*a, **k)

        self.patches.set(cp, "checkpoint", checkpoint)

    def snapshot_backends(self) -> None:
        self._backend_values = self._read_backends()
        self._safe("trained weights observation", self._record_trained)

    def _record_trained(self) -> None:
        ref = self.ctl.clock.anchor
        anchor = ref() if ref is not None else None
        self.config["trained_weights"] = {"value": placement.trained_weights(anchor), "where": None}

    @staticmethod
    def _read_backends() -> dict:
        vals: dict = {}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cudnn = torch.backends.cudnn
            for key, get in (
                ("cudnn.benchmark", lambda: bool(cudnn.benchmark)),
                ("cudnn.deterministic", lambda: bool(cudnn.deterministic)),
                ("float32_matmul_precision", torch.get_float32_matmul_precision),
                ("deterministic_algorithms", torch.are_deterministic_algorithms_enabled),
            ):
                try:
                    vals[key] = get()
                except Exception:
                    pass
            try:
                vals["tf32.matmul"] = bool(torch.backends.cuda.matmul.allow_tf32)
            except Exception:
                try:
                    vals["tf32.matmul"] = torch.backends.cuda.matmul.fp32_precision == "tf32"
                except Exception:
                    pass
            try:
                vals["tf32.cudnn"] = bool(cudnn.allow_tf32)
            except Exception:
                try:
                    vals["tf32.cudnn"] = cudnn.conv.fp32_precision == "tf32"
                except Exception:
                    pass
        return vals

    def _patch_autocast(self) -> None:
        from torch.amp.autocast_mode import autocast

        orig_enter = autocast.__enter__
        obs = self

        @functools.wraps(orig_enter)
        def __enter__(ac):
            if not obs._autocast_done:
                obs._safe("autocast observation", obs._record_autocast, ac)
            return orig_enter(ac)

        self.patches.set(autocast, "__enter__", __enter__)

    def _record_autocast(self, ac) -> None:
        if capturing():
            return
        enabled = bool(getattr(ac, "_enabled", True))
        prev = self.config.get("autocast")
        if prev is not None and (prev["value"]["enabled"] or not enabled):
            return
        self._set("autocast", {"enabled": enabled, "dtype": dtype_name(getattr(ac, "fast_dtype", None)),
                               "device_type": getattr(ac, "device", None)})
        self._safe("autocast provenance", self._follow_autocast, self.config["autocast"])
        if enabled:
            self._autocast_done = True

    def _follow_autocast(self, entry: dict) -> None:
        """Where the autocast's ``enabled`` and ``dtype`` come from (``enabled=args.amp`` → the
        option ``--amp``), and the ``if`` switches around the ``with`` (the script's own AMP
        switch: advisor.patch.switches)."""
        import sys

        frame = provenance.outside(sys._getframe(1), (ADVISOR_DIR, TORCH_DIR))
        if frame is None:
            return
        call = provenance.context_call(frame, ("autocast",))
        if call is None:
            return   # not the script's own `with` (advisor's amp trial enters it from a forward hook)
        # torch.autocast(device_type, dtype, enabled); torch.cuda.amp.autocast(enabled, dtype)
        where = provenance.positions(frame, call, ("enabled", "dtype")) or {"enabled": 2, "dtype": 1}
        entry["provenance"] = self.walker.at_call(frame, call, where)
        switches = [{"test": provenance.sa.code(test), "taken": taken, "chain": self.walker.of_expr(frame, test)}
                    for test, taken in provenance.gates(frame, frame.f_lineno)[:3]]
        if switches:
            entry["gates"] = switches

    # ------------------------------------------------------------------ documents
    def config_doc(self, step_counts: list | None = None) -> dict:
        """The observed config; step_counts (StepObservations.micro_rows): a step that accumulates
        gradients over several batches is noted as "gradient_accumulation", at the optimizer."""
        from advisor.measure import micro_batches, tokens

        doc = dict(self.config)
        window = getattr(self.ctl, "window", None)
        counted = tokens({"tokens": window.tokens}) if window is not None else None
        if counted is not None and counted[1]:   # the timed steps' masked batches (runner/tokens.py)
            doc["tokens"] = {"value": {"real": counted[0], "all": counted[1],
                                       "padding_frac": 1.0 - counted[0] / counted[1],
                                       "widths": sorted(self.ctl.seen.widths)}, "where": None}
        if "dataloader" not in doc and self._first_loader is not None:
            doc["dataloader"] = self._first_loader
        micro = micro_batches({"step_counts": step_counts or []})
        if micro > 1:
            doc["gradient_accumulation"] = {"value": {"micro_batches": micro},
                                            "where": (doc.get("optimizer") or {}).get("where")}
        model = self._attention_model() if self._attention_model is not None else None
        if model is not None and (attention := hf_models.attention_of(model)) is not None:
            # as the steps ran it: a fix's switch (sdpa-attention) comes at the first forward
            doc["attention"] = {**doc["attention"], "value": attention}
        if (used := dali_use.observed()) is not None:
            doc["dali"] = {"value": used, "where": None}
        if self.checkpoint_calls:
            doc["activation_checkpointing"] = {"value": {"calls": self.checkpoint_calls}, "where": None}
        if self.cli.parsers:   # every option the script's parsers read, as this run gave it
            doc["cli_options"] = {"value": self.cli.all_options(), "where": None}
        if self._config_files:
            first = next(iter(self._config_files.values()))
            doc["config_files"] = {"value": list(self._config_files), "where": first}
        vals = self._backend_values if self._backend_values is not None else self._read_backends()
        for key in _BACKEND_KEYS:
            if key in vals:
                doc[key] = {"value": vals[key], "where": self._backend_sites.get(key)}
        return doc

    def _start_gpu_query(self) -> None:
        self._gpu = environment.GpuQuery()

    def environment(self) -> dict:
        return environment.environment(self._gpu)

    def memory(self) -> dict:
        return environment.memory()

