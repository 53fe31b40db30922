"""Step detection and phase ranges with no change to the script.

Permanent (whole run): optimizer step pre/post hooks (steps, advisor::optimizer), DataLoader
iterator ``__next__`` (advisor::data, data-wait time, batch size), ``Tensor.backward`` /
``torch.autograd.backward`` (advisor::backward, loss), ``GradScaler.scale`` (unscaled loss),
``torch.save`` (a sign of work: runner/liveness.py, as batches, backwards and forwards are too).
Loop hooks (removed when the measure stage starts, so measured steps pay nothing for them):
global module forward hooks (advisor::forward, model input), ``Tensor.to`` / ``Tensor.cuda``
(advisor::h2d, in copies.py), ``Optimizer.zero_grad`` / ``Module.zero_grad`` (advisor::zero_grad).
Where no optimizer steps, the backward, the outermost forward and the DataLoader batch look for
the parameters' update that ends a step (runner/updates.py)."""

from __future__ import annotations

import functools
import threading
from time import perf_counter

import torch
from torch.optim.optimizer import (
    register_optimizer_step_post_hook,
    register_optimizer_step_pre_hook,
)

from advisor.runner import epochs
from advisor.runner._util import Patcher
from advisor.runner.copies import CopyHooks
from advisor.runner.items import ItemHooks
from advisor.runner.observe import first_tensor
from advisor.runner.tokens import tokens_of
from advisor.runner.updates import ParameterUpdates
from advisor.runtime.capture import capturing as _is_compiling  # noqa: E402 - Dynamo or a jit trace
from advisor.runtime.patching import in_loading, loading

_get_ident = threading.get_ident


class Hooks(CopyHooks, ItemHooks):
    def __init__(self, ctl, obs):
        self.c = ctl
        self.obs = obs
        self.permanent = Patcher()
        self.loop = Patcher()
        self.loop_active = False
        self._opt_tokens: dict = {}
        self._in_backward = False
        self._fwd_token = None
        self.depth = 0               # nn.Module call depth (forward ranges on the outermost)
        self._scaled = None          # (scaled output, unscaled detached) from GradScaler.scale
        self._batch_seen = False
        self._step0 = None           # (iterator, batch, epoch loop) last drawn before the first training step
        self._first_iter = None
        self._h2d_done = False
        self._main_ident = threading.main_thread().ident
        self.updates = ParameterUpdates(Patcher, lambda e: ctl.internal_error("parameter-update steps", e))

    # ------------------------------------------------------------------ install / remove
    def install(self) -> None:
        self.permanent.add(register_optimizer_step_pre_hook(self._opt_pre))
        self.permanent.add(register_optimizer_step_post_hook(self._opt_post))
        self._patch_dataloader()
        self._patch_backward()
        self._patch_scaler()
        self._patch_save()
        self.c.oneoffs.patch_train(self.permanent, self.c.commit)
        self._time_item()  # permanent, under the loop's .item() observer
        self._install_loop_hooks()

    def _install_loop_hooks(self) -> None:
        if not self.loop.active:  # quiet: still in place, only switched off
            nnm = torch.nn.modules.module
            self.loop.add(nnm.register_module_forward_pre_hook(self._fwd_pre))
            self.loop.add(nnm.register_module_forward_hook(self._fwd_post, always_call=True))
            self._patch_to()
            self._patch_zero_grad()
            self._patch_item()
        self.loop_active = True

    def remove_loop_hooks(self, keep_installed: bool = False) -> None:
        """Off for the timed steps. ``keep_installed`` (a compiled model): switched off but
        left in place. torch.compile guards on the global module hooks and the patched
        methods it traced through, so taking them away recompiles the model (and re-records
        its CUDA graphs), and putting them back for the profiled steps recompiles again, seconds
        a process (docs/measurement.md). Inside compiled code the hooks are not called,
        so left in place they cost only the few module calls outside it."""
        self.loop_active = False
        if not keep_installed:
            self.loop.undo()
        self.depth = 0
        if self._fwd_token is not None:
            tok, self._fwd_token = self._fwd_token, None
            self.c.ranges.pop(tok)

    def remove_all(self) -> None:
        self.remove_loop_hooks()
        self.updates.off()   # its Tensor.data wrapper, if any
        self.permanent.undo()

    def _ranged(self, name: str, fn, *args, **kwargs):
        """fn(*args, **kwargs), inside the range `name` while advisor's ranges are on."""
        if not self._ranges_on():
            return fn(*args, **kwargs)
        tok = self.c.ranges.push(name)
        try:
            return fn(*args, **kwargs)
        finally:
            self.c.ranges.pop(tok)

    def _ranges_on(self) -> bool:
        r = self.c.ranges
        return r.profiling or r._push is not None

    # ------------------------------------------------------------------ optimizer
    def _opt_pre(self, opt, args, kwargs):
        if _is_compiling():
            return None
        c = self.c
        if self.updates.on:   # before it changes a parameter: its steps are the steps
            self.updates.off()
        if c.pending:
            c.commit()
        if self._ranges_on():
            self._opt_tokens[id(opt)] = c.ranges.start("advisor::optimizer")
        return None

    def _opt_post(self, opt, args, kwargs):
        if _is_compiling():
            return None
        tok = self._opt_tokens.pop(id(opt), None)
        if tok is not None:
            self.c.ranges.end(tok)
        self.c.optimizer_stepped(opt)
        return None

    def updated(self) -> None:
        """Where no optimizer steps: the parameters the last backward produced gradients for
        have changed since it ended, so a step ended (runner/updates.py)."""
        if self.updates.changed():
            self.c.parameters_updated()

    # ------------------------------------------------------------------ data
    def _patch_dataloader(self) -> None:
        from torch.utils.data.dataloader import _BaseDataLoaderIter

        orig = _BaseDataLoaderIter.__next__
        hooks, c, seen = self, self.c, self.c.seen

        @functools.wraps(orig)
        def __next__(it):
            c.progress_log.alive()
            if c.pending:
                c.commit()
            if hooks.updates.armed:
                hooks.updated()
            tok = c.ranges.push("advisor::data") if hooks._ranges_on() else None
            seen.counted(0)
            t0 = perf_counter()
            loading(+1)
            try:
                batch = orig(it)
            finally:
                loading(-1)
                evaluating = c.oneoffs.evaluating()  # its batches are neither the step's waits nor its loader
                if not evaluating:
                    seen.waited_for_data(perf_counter() - t0)
                if tok is not None:
                    c.ranges.pop(tok)
            if evaluating:
                return batch
            first_step = c.clock.steps_seen == 0
            loop = hooks._epoch_loop() if first_step else None   # read from the loop's own frames
            if not hooks._batch_seen:
                hooks._first_batch(it, batch, loop)
            c.oneoffs.batch(first_tensor(batch))
            counted = tokens_of(batch)
            if counted is not None:
                seen.saw_tokens(*counted)
            if first_step:
                hooks._step0 = (it, batch, loop)
            return batch

        self.permanent.set(_BaseDataLoaderIter, "__next__", __next__)

    def first_step(self) -> None:
        """The first training step ended: the loader that fed it is the training loader. A
        script that runs a validation pass first drew its first batch from another one."""
        step0, self._step0 = self._step0, None
        if step0 is None or step0[0] is self._first_iter:
            return
        self.c.seen.forget_batch()
        self._first_batch(*step0)

    def _epoch_loop(self) -> dict | None:
        try:
            return epochs.epoch_loop(self.obs.sites) or epochs.framework_steps()
        except Exception as e:
            self.c.internal_error("epoch count", e)
            return None

    def _first_batch(self, it, batch, loop: dict | None) -> None:
        self._batch_seen = True
        self._first_iter = it
        try:
            self.obs.on_first_batch(it, loop)
            t = first_tensor(batch)
            if t is not None and t.dim() >= 1:
                self.c.seen.saw_batch(int(t.shape[0]), "dataloader")
            try:
                self.c.window.batches_per_epoch = int(len(it)) or None
            except TypeError:  # an IterableDataset without __len__: no epochs to align to
                pass
        except Exception as e:
            self.c.internal_error("batch observation", e)

    # ------------------------------------------------------------------ backward / loss
    def _loss_of(self, t):
        sc = self._scaled
        if sc is not None and sc[0] is t:
            t = sc[1]
        self._scaled = None
        try:
            return t.detach() if t.numel() == 1 else float("nan")
        except Exception:
            return None

    def _patch_backward(self) -> None:
        hooks, c = self, self.c
        orig_tb = torch.Tensor.backward

        def run(loss, roots, fn, *a, **k):
            if hooks._in_backward or _is_compiling():
                return fn(*a, **k)
            c.progress_log.alive()
            if c.pending:
                c.commit()
            updates = hooks.updates
            if updates.on:   # no optimizer: did the last backward's parameters change since?
                hooks.updated()
                updates.before_backward(roots)
            losses = c.losses
            if losses.current is None and isinstance(loss, torch.Tensor):
                losses.saw(hooks._loss_of(loss))
            c.seen.counted(1)
            c.oneoffs.backward()
            hooks._in_backward = True
            try:
                out = hooks._ranged("advisor::backward", fn, *a, **k)
            finally:
                hooks._in_backward = False
            updates.after_backward()
            return out

        @functools.wraps(orig_tb)
        def backward(self, *a, **k):
            return run(self, (self,), orig_tb, self, *a, **k)

        self.permanent.set(torch.Tensor, "backward", backward)

        orig_ab = torch.autograd.backward

        @functools.wraps(orig_ab)
        def autograd_backward(tensors, *a, **k):
            roots = tensors if isinstance(tensors, (list, tuple)) else (tensors,)
            return run(roots[0] if roots else None, roots, orig_ab, tensors, *a, **k)

        self.permanent.set(torch.autograd, "backward", autograd_backward)

    def _patch_scaler(self) -> None:
        try:
            from torch.amp.grad_scaler import GradScaler
        except Exception:
            return
        orig = GradScaler.scale
        hooks = self

        @functools.wraps(orig)
        def scale(scaler, outputs):
            out = orig(scaler, outputs)
            if isinstance(outputs, torch.Tensor) and out is not outputs:
                hooks._scaled = (out, outputs.detach())
            return out

        self.permanent.set(GradScaler, "scale", scale)

    def _patch_save(self) -> None:
        """A checkpoint written between steps is work, not a stall (runner/liveness.py)."""
        import torch.serialization as ser

        alive = self.c.progress_log.alive
        orig = torch.save

        @functools.wraps(orig)
        def save(*args, **kwargs):
            alive()
            try:
                return orig(*args, **kwargs)
            finally:
                alive()

        self.permanent.set(torch, "save", save)
        if ser.save is orig:
            self.permanent.set(ser, "save", save)

    # ------------------------------------------------------------------ forward
    def _fwd_pre(self, module, args):
        # DataParallel replica threads; a Dataset's transform modules while a batch is made
        if _is_compiling() or _get_ident() != self._main_ident or in_loading():
            return None
        c = self.c
        c.progress_log.alive()  # also switched off (a compiled model's timed steps): its forwards are work
        if c.pending:
            c.commit()
        if not self.loop_active:  # the measure stage began: hooks are gone or switched off
            return None
        d = self.depth
        if d:
            self.depth = d + 1
            return None
        if self.updates.armed:
            self.updated()
        self.depth = 1
        if torch.is_grad_enabled():
            c.seen.counted(2)
            c.oneoffs.trained(module)
        obs = self.obs
        if obs.want_forward:
            try:
                obs.on_outer_forward(module, args)
            except Exception as e:
                obs.want_forward = False
                c.internal_error("model input observation", e)
        if c.seen.batch_size is None and _has_parameters(module):  # not a transform (Normalize) called by hand
            t = first_tensor(args)
            if t is not None and t.dim() >= 1:
                c.seen.saw_batch(int(t.shape[0]), "model-input")
        if self._ranges_on():
            self._fwd_token = c.ranges.push("advisor::forward")
        return None

    def _fwd_post(self, module, args, output):
        if _is_compiling() or _get_ident() != self._main_ident or in_loading() or not self.loop_active:
            return None
        c = self.c
        d = self.depth - 1
        if d > 0:
            self.depth = d
            return None
        self.depth = 0
        tok = self._fwd_token
        if tok is not None:
            self._fwd_token = None
            c.ranges.pop(tok)
        return None

    # ------------------------------------------------------------------ zero_grad
    def _patch_zero_grad(self) -> None:
        hooks, c = self, self.c

        def make(orig):
            @functools.wraps(orig)
            def zero_grad(obj, *args, **kwargs):
                if _is_compiling():
                    return orig(obj, *args, **kwargs)
                if c.pending:
                    c.commit()
                if not hooks.loop_active:
                    return orig(obj, *args, **kwargs)
                if not hooks.obs._zero_grad_seen:
                    stn = kwargs.get("set_to_none", args[0] if args else True)
                    try:
                        hooks.obs.on_zero_grad(stn)
                    except Exception as e:
                        c.internal_error("zero_grad observation", e)
                return hooks._ranged("advisor::zero_grad", orig, obj, *args, **kwargs)

            return zero_grad

        self.loop.set(torch.optim.Optimizer, "zero_grad", make(torch.optim.Optimizer.zero_grad))
        self.loop.set(torch.nn.Module, "zero_grad", make(torch.nn.Module.zero_grad))


def _has_parameters(module) -> bool:
    return next(iter(module.parameters()), None) is not None
