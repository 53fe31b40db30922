"""Run directories: where each `advisor analyze` writes, never reusing an earlier one."""

from __future__ import annotations

import datetime as _dt
import os
from pathlib import Path

import orjson

DEFAULT_ROOT = "reports"
# Written into a reports directory advisor creates itself, as pytest and ruff do in their caches:
# the runs stay out of the user's `git status` (a directory that was there is left as it was).
GITIGNORE = "# Created by advisor automatically: its runs stay out of git.\n*\n"


def new_run_dir(script: str, out: str | None = None, root: str | None = None) -> Path:
    """Create a fresh run directory.

    With ``out`` the directory is exactly that path and must not already hold a run
    (an earlier run is never overwritten). Otherwise ``<root>/<timestamp>-<stem>`` with
    ``-2``, ``-3``… appended when the name is taken.
    """
    if out:
        path = Path(out).absolute()
        try:
            if path.is_dir() and any(path.iterdir()):
                raise FileExistsError(f"--out {out} exists and is not empty; advisor never overwrites a run")
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError as exc:
            if path.is_dir():
                raise
            raise OSError(f"--out {out}: cannot create the run directory (a file is in the way)") from exc
        except OSError as exc:
            raise OSError(f"--out {out}: cannot create the run directory ({exc.strerror or exc})") from None
        return _writable(path)
    base_root = Path(root or os.environ.get("ADVISOR_REPORTS", DEFAULT_ROOT)).absolute()
    _create_root(base_root)
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    stem = "".join(c if c.isalnum() or c in "-_" else "_" for c in Path(script).stem) or "script"
    candidate = base_root / f"{stamp}-{stem}"
    n = 2
    while True:
        try:
            candidate.mkdir(parents=True, exist_ok=False)
            return _writable(candidate)
        except FileExistsError:
            if not base_root.is_dir():
                raise OSError(f"{base_root}: cannot create run directories under it (not a directory)") from None
            candidate = base_root / f"{stamp}-{stem}-{n}"
            n += 1
        except OSError as exc:
            raise OSError(f"{candidate}: cannot create the run directory ({exc.strerror or exc})") from None


def _create_root(root: Path) -> None:
    """The reports directory, with its .gitignore when advisor is the one creating it; one that
    exists (a .gitignore of its own or not, committed example reports under it) is left alone.
    What fails here is said when the run directory under it cannot be created."""
    try:
        root.mkdir(parents=True)
    except OSError:  # there already (or not creatable: new_run_dir says so)
        return
    try:
        with open(root / ".gitignore", "x", encoding="utf-8") as f:
            f.write(GITIGNORE)
    except OSError:  # a runs directory without it still works
        pass


def _writable(path: Path) -> Path:
    """The run directory, once a file could be created in it: a directory advisor cannot write
    fails here, in one line, before any process starts."""
    probe = path / f".advisor-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OSError(f"{path}: the run directory is not writable ({exc.strerror or exc})") from None
    return path


def write_json(path: Path, data: object) -> None:
    """Write JSON atomically, so a reader never sees half a file."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    os.replace(tmp, path)


def write_run(run_dir: Path, doc: dict) -> None:
    """run.json, checked against its contract first (advisor.contracts.check_run)."""
    from advisor.contracts import check_run

    summary = sandbox_summary(Path(run_dir))
    if summary:
        doc["sandbox"] = summary
    write_json(Path(run_dir) / "run.json", check_run(doc))


def sandbox_summary(run_dir: Path) -> dict | None:
    """run.json ``sandbox``: which sandbox the processes after the baseline ran in (docs/safety.md)
    and, process by process, what it redirected, left undone or took into its copy-on-write
    layer (from each process's child.json)."""
    procs = {}
    kinds, why = set(), None
    for child in sorted([*run_dir.glob("trials/*/child.json"), *run_dir.glob("verify/run-*/child.json"),
                         *run_dir.glob("schedule/*/child.json")]):
        try:
            sb = orjson.loads(child.read_bytes()).get("sandbox")
        except (OSError, ValueError, AttributeError):
            continue
        if not isinstance(sb, dict):
            continue
        kinds.add(str(sb.get("kind")))
        why = why or sb.get("why")
        name = str(child.parent.relative_to(run_dir))
        procs[name] = {k: sb.get(k) for k in ("redirected", "absorbed", "unredirected") if sb.get(k)}
    if not procs:
        return None
    out = {"kind": kinds.pop() if len(kinds) == 1 else "mixed", "processes": procs}
    if why:
        out["why"] = why
    return out


def read_json(path: Path) -> dict:
    return orjson.loads(Path(path).read_bytes())


def read_run(path: str | os.PathLike) -> dict:
    """A run.json read back (untrusted: advisor.contracts.read_run gives it its readers' shapes);
    OSError or ValueError with a one-line reason naming the file."""
    from advisor.contracts import read_run as conform_run

    try:
        doc = orjson.loads(Path(path).read_bytes())
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc})") from None
    except OSError as exc:
        raise OSError(f"{path}: cannot read ({exc.strerror or exc})") from None
    try:
        return conform_run(doc)
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def find_run_json(path: str | os.PathLike) -> Path:
    """Accept a run directory or its run.json; one clear error otherwise."""
    p = Path(path)
    if p.is_dir():
        p = p / "run.json"
    if not p.is_file():
        raise FileNotFoundError(f"no run.json at {path}: pass a run directory written by `advisor analyze`")
    return p
