"""The fixes' run-time parts, applied inside a trial's child process.

Each module here is the run-time part of a fix of advisor.fixes (its class names the module as
``runtime``) and defines ``describe(params) -> str``, ``not_applicable(config, environment,
params) -> str | None`` (why it cannot apply to this script, judged from the baseline's
observed config) and ``apply(params) -> None``, which patches torch in the child before the
user's script runs (advisor.fixes.apply_all). The user's files are never edited: the fix's
``edit`` writes the equivalent source edit into fixes.patch. The helpers they share are
advisor.runtime's.
"""
