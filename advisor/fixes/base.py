"""What a fix is: one object holding everything about it (see advisor/fixes/__init__.py).

A fix's class says what it changes (numerics, the batch), how the trial ladder treats it (its
traits), which trials a finding's proposal becomes (``candidates``), how it is applied at run
time in a trial's child process (``runtime``: a module of advisor.interventions, imported only
there, so the parent stays free of torch), the edit ``fixes.patch`` makes for it (``edit``) and
the check the patch's verification runs on what the patched script observed (``check``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

NOT_CHECKED = (None, "", "not checked in the run's observations")


@dataclass(frozen=True)
class FixSpec:
    """One fix with its parameters, however a record names it: ``{"name"}`` (a trial spec,
    ``--apply``), ``{"intervention"}`` (a rule's proposal, the patch's fixes) or ``{"fix"}`` (a
    trial record)."""
    name: str
    params: Mapping = field(default_factory=dict)

    @classmethod
    def of(cls, record: Mapping) -> FixSpec:
        name = record.get("name") or record.get("intervention") or record.get("fix")
        return cls(str(name), dict(record.get("params") or {}))

    def as_spec(self) -> dict:
        """The shape trial specs and ``--apply`` use: {"name", "params"}."""
        return {"name": self.name, "params": dict(self.params)}


class Fix:
    """One fix. Subclasses set ``name`` and the class attributes that differ from these
    defaults, and override the facets they implement."""

    name: ClassVar[str]
    # "fix": a rung of the ladder; "test": a rung no rule proposes, with no edit (the numerics
    # check's own test); "bound": measures a limit, never kept (the data-free ceiling);
    # "reference": a run to compare with (one GPU for ddp); "suggestion": a rule may propose
    # it, advisor cannot apply it.
    kind: ClassVar[str] = "fix"
    runtime: ClassVar[str | None] = None     # advisor.interventions.<runtime> applies it in a trial
    changes_numerics: ClassVar[bool] = False  # the loss may differ from the baseline's (wider check)
    changes_batch: ClassVar[bool] = False     # the batch each process sees is not the baseline's
    # the ladder's traits (advisor.trials.rungs, docs/trials.md says why each exists)
    bundled: ClassVar[bool] = False           # small and safe: trialled together with the others queued
    partner: ClassVar[str | None] = None      # pays only with this fix on an NCHW conv net: one rung
    last: ClassVar[bool] = False              # tried after every other queued fix
    # runs a process per GPU (ddp): nothing rejected before is retried on its stack (ladder._commit)
    scales_out: ClassVar[bool] = False
    compiles: ClassVar[bool] = False          # compiles the model: fixes on a host-bound step ride with it
    rides_with_compile: ClassVar[bool] = False  # rejected on a host-bound step: tried again with compile
    slow_start: ClassVar[bool] = False        # its process is long to start: guessed two trials ahead
    fresh: ClassVar[bool] = False             # its trials are never started ahead
    apart: ClassVar[bool] = False             # measured apart, on top of the final stack, never kept
    allowed_by: ClassVar[str | None] = None   # the --allow word that lets it override the user's choice (overrides)
    # its gain is not bounded by its rule's estimate (compile fuses kernels besides taking
    # launches away): the ladder does not stop early while it is queued (trials/early.py)
    beyond_estimate: ClassVar[bool] = False
    feeds_data: ClassVar[bool] = False        # a fix of the data pipeline: the data-free ceiling's cached batch stands in for it
    same_graphs: ClassVar[bool] = False       # leaves torch.compile's graphs of the model as they are (trials.compile_book)
    tie_reason: ClassVar[str] = "and came later"  # why a later value of its group wins a tie
    # the patch
    # fixes whose edit its own makes needless: fixes.patch leaves their hunks out where it is
    # placed (advisor.patch.supersede), saying why (supersedes_why)
    supersedes: ClassVar[tuple[str, ...]] = ()
    supersedes_why: ClassVar[str] = ""
    where_key: ClassVar[str | None] = None    # the config key whose call site its rule's "where" stands for
    editor: ClassVar[str | None] = None       # "module:function" of its source edit (advisor.patch.*)

    # --- run time (in the trial's child process) -------------------------------------------
    def module(self):
        if self.runtime is None:
            raise KeyError(f"{self.name!r} is not applied at run time")
        return importlib.import_module(f"advisor.interventions.{self.runtime}")

    def describe(self, params: Mapping) -> str:
        return self.module().describe(params)

    def not_applicable(self, config: dict, environment: dict, params: Mapping) -> str | None:
        """Why it cannot apply to this script, judged from the observed config; None: it can."""
        return self.module().not_applicable(config, environment, params)

    def apply(self, params: dict) -> None:
        self.module().apply(params)

    def observe(self) -> dict | None:
        """What a run shows of the fix, recorded in its config as ``fix.<name>`` (called in the
        child when it saves; the patch's check reads it). None: nothing to record."""
        return None

    def processes(self, params: Mapping) -> int | None:
        """How many processes a run with this fix launches (ddp: one per GPU); None: the run's own."""
        return None

    def batch_factor(self, params: Mapping) -> int:
        """How many times the script's batch a process of a run with this fix takes."""
        return 1

    # --- the ladder ----------------------------------------------------------------------
    def apart_note(self, stack: list[str]) -> str:
        """Why a fix measured apart (``apart``) is not kept, said after its verdict; ``stack``:
        the names of the kept fixes it ran on."""
        if self.changes_batch:
            return "changes training dynamics: scale the learning rate with the batch"
        return "changes numerics: compare its loss curve with the kept fixes' before you keep it"

    def overrides(self, config: dict) -> str | None:
        """The user's explicit choice this fix would override, in words with its place (a
        reproducibility setting): the fix is then measured apart and left out of fixes.patch
        unless the user allows it (--allow). None: nothing of theirs is overridden."""
        return None

    def candidates(self, params: dict, environment: dict) -> list[dict]:
        """A finding's proposal → the trials that test it, each the keyword arguments of an
        advisor.trials.candidates.Candidate beside name/origin/gain ("fallback": another such
        dict, tried when this one's verdict is in "fallback_when")."""
        return [{"params": params}]

    # --- fixes.patch ---------------------------------------------------------------------
    def requires(self, params: Mapping, config: dict, names: set[str]) -> list[dict]:
        """Other edits this fix's edit needs as code, given the fixes in the patch (``names``):
        [{"intervention", "params", "reason"}]."""
        return []

    def edit(self, ctx, fix: dict, params: dict) -> dict:
        """The source edit: a note ({"applied": True, "where", "edits"...}); raises
        advisor.patch.core.SkipFix when it cannot be placed. By default the function
        ``editor`` names."""
        if self.editor is None:
            from advisor.patch.core import SkipFix

            raise SkipFix(f"advisor has no source edit for {self.name!r}")
        module, _, function = self.editor.partition(":")
        return getattr(importlib.import_module(module), function)(ctx, fix, params)

    def transformers_args(self, ctx, fix: dict, params: dict, calls: list) -> tuple[list, dict] | None:
        """Under a Hugging Face Trainer: (TrainingArguments items [(keyword, code)], note
        extras); None when the fix is no argument of the Trainer's (its generic edit works);
        SkipFix when the Trainer does it already or cannot."""
        return None

    def lightning_edit(self, ctx, fix: dict, params: dict, trainers: list) -> dict | None:
        """Under Lightning: the note of an edit made the Lightning way (a Trainer argument, the
        model handed to fit); None: the user's own code, the generic edit."""
        return None

    # --- the patch's verification --------------------------------------------------------
    def check(self, config: dict, params: Mapping, base: dict) -> tuple[bool | None, str, str]:
        """(took effect?, expected, observed) in the patched run's observed config; None where
        the run cannot show it. ``base``: the baseline's result."""
        return NOT_CHECKED


def value(config: dict, key: str) -> dict:
    """An observed config entry's value, {} when absent or not an object."""
    v = (config.get(key) or {}).get("value")
    return v if isinstance(v, dict) else {}


def trained(config: dict) -> dict:
    return value(config, "trained_weights")


def loader(config: dict) -> dict:
    return value(config, "dataloader")
