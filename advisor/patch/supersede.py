"""No hunk in fixes.patch that another kept fix supersedes.

A fix's definition names the fixes whose edit its own makes needless (``Fix.supersedes``):
preload-dataset writes its DataLoader with num_workers=0 and no pinned memory, every batch a
gather of tensors already on the device, so dataloader-workers' edit (its worker count, at the
call or at the option that sets it; its non_blocking copies) and pin-memory's change nothing
the preloaded loop does. Both are kept fixes (their trials measured them), but their hunks
would be dead code in the user's script, and a worker-count option's default changed to a
value nothing reads. So the patch is made twice where it must: once with every kept fix, to
see which are placed; then without the fixes that a placed fix supersedes. Each of those keeps
its note, marked ``superseded_by``, with no edit, no command-line change and the reason. A
superseding fix that cannot be placed (its note says why) supersedes nothing: the others'
edits stay.
"""

from __future__ import annotations

from collections.abc import Callable

from advisor.contracts import PatchNote


def superseded(notes: list[PatchNote], registry) -> dict[str, str]:
    """{fix: the placed fix that supersedes it} among the placed fixes of a patch."""
    placed = [n.get("intervention") for n in notes if n.get("applied")]
    out: dict[str, str] = {}
    for by in placed:
        for name in registry.trait(by, "supersedes", ()) or ():
            if name in placed and name != by and name not in out:
                out[name] = by
    return out


def note_for(note: PatchNote, by: str, registry) -> PatchNote:
    """A superseded fix's note: where it would have gone, and why the diff leaves it out."""
    because = registry.trait(by, "supersedes_why", "") or f"{by}'s edit makes it needless"
    why = f"superseded by {by}: left out of the diff ({because})"
    return {"intervention": note.get("intervention"), "applied": True, "superseded_by": by,
            "where": note.get("where"), "edits": [], "warning": why}


def make_patch(make: Callable, script_path: str, specs: list[dict], config: dict, root, *,
               texts: dict | None = None, **kw) -> tuple[str, list[PatchNote]]:
    """``make`` (advisor.patch.make_patch) for ``specs``, less the fixes another placed fix
    supersedes; their notes say so, in the fixes' order. ``texts``: as make's, the patched
    files' texts of the diff returned."""
    registry = kw["registry"]
    first: dict = {}
    diff, notes = make(script_path, specs, config, root, texts=first, **kw)
    gone = superseded(notes, registry)
    if gone:
        rest = [s for s in specs if (s or {}).get("intervention") not in gone]
        again: dict = {}
        diff2, notes2 = make(script_path, rest, config, root, texts=again, **kw)
        by_name = {n.get("intervention"): n for n in notes2}
        if all(by_name.get(by, {}).get("applied") for by in gone.values()):
            old = {n.get("intervention"): n for n in notes}
            names = [(s or {}).get("intervention") for s in specs]
            merged = [note_for(old[name], gone[name], registry) if name in gone else None for name in names]
            placed = iter(n for n in notes2 if n.get("intervention") not in gone)
            notes = [m if m is not None else next(placed) for m in merged] + list(placed)
            diff, first = diff2, again
    if texts is not None:
        texts.update(first)
    return diff, notes
