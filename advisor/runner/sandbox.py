"""The Python-level sandbox: nothing a trial's script does reaches the user's files.

Installed in every process advisor starts besides the baseline (spec ``sandbox_writes``): the
trials, the references, the processes started ahead, the ceiling, a short script's runs and
the patch's verification. Each starts where the baseline did, in the user's own working
directory with the script at its own path, so relative paths, ``__file__`` and ``sys.path``
resolve exactly as under plain python; isolation works by path, never by moving the working
directory. Beneath this layer, where the machine allows, the whole process runs in a
copy-on-write view of the filesystem (runner/jail.py); this layer is what remains where it does
not (many containers refuse user namespaces), and it keeps the script's own outputs where the
user can read them either way.

A mutating call on a path outside the run directory is turned onto
``<run_dir>/outputs/<the path, made absolute>`` (see ``sandbox_hooks.install``), whoever makes
it: the user's code or an installed library (pandas' ``to_csv``, PIL's ``save``, TensorBoard's
writer, Lightning's checkpoints all write the user's files through ``open``). Files opened for
writing or appending (an append starts from a copy of the user's file), ``os.open`` with a
writing flag, directories made, ``torch.save``/``numpy.save``/``safetensors`` targets, the
destinations of renames, moves, copies, symbolic and hard links; a later read of such a path
reads the redirected copy. A delete, a ``chmod`` or ``utime`` of a user's file is not done (a
second delete of it then fails as a real one would); a rename or move of one copies it. Each
such path is noted once and listed in child.json ``sandbox``.

Let through: the run directory (advisor's outputs, the trace), /dev and /proc, directories the
script made with ``tempfile`` in this process, and the caches libraries keep for themselves
(``library_caches``: torch.compile's kernels, CUDA's JIT cache, the Hugging Face and torch hub
caches: redirecting half of a library's files broke compilation, since native code writes the
other half where it was asked).

``sources`` (the patch's verification): the user's files that read as other text in this
process, the patched copies; the script and every module it imports from them are read from
the copy under their own paths (``sandbox_hooks._install_sources``).
"""

from __future__ import annotations

import json
import os
import stat
import threading

_WRITE_CHARS = set("wax+")
LIST_MAX = 200   # entries of child.json sandbox.redirected / absorbed


def library_caches(existing: bool = False) -> list[str]:
    """Caches that libraries fill for themselves, kept real in both sandbox layers: a kernel
    compiled by one trial serves the next (torch.compile's Inductor and Triton caches, CUDA's JIT
    cache), and a library whose native code writes part of its files (a Hugging Face datasets
    cache's Arrow files) finds the rest where it put them. ``existing``: only those that exist
    now (the copy-on-write layer binds directories; the Python layer judges paths)."""
    import getpass
    import tempfile

    home = os.path.expanduser("~")
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = str(os.getuid())
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(home, ".cache")
    # Inductor keeps some of its caches (precompiled headers, locks) in its default directory
    # even when TORCHINDUCTOR_CACHE_DIR names another
    out = [*filter(None, [os.environ.get("TORCHINDUCTOR_CACHE_DIR")]),
           os.path.join(tempfile.gettempdir(), f"torchinductor_{user}"),
           *filter(None, [os.environ.get("TRITON_CACHE_DIR")]), os.path.join(home, ".triton"), os.path.join(home, ".nv"),
           os.environ.get("HF_HOME") or os.path.join(cache, "huggingface"),
           os.environ.get("TORCH_HOME") or os.path.join(cache, "torch")]
    return [p for p in out if not existing or os.path.isdir(p)]


def at_or_above(path: str, found) -> str | None:
    """The first of ``path`` and the directories above it that ``found`` says yes to, else None."""
    while True:
        if found(path):
            return path
        up = os.path.dirname(path)
        if up == path:
            return None
        path = up


def _under(path: str, dirs) -> bool:
    return any(path == d or path.startswith(d + os.sep) for d in dirs)


def real(path, follow: bool = True) -> str | None:
    """The absolute, resolved path of a path-like; None for a file descriptor or a non-path.
    ``follow=False``: the last component itself, not what a symbolic link there points to (a
    delete, a rename, a new link act on the link)."""
    if isinstance(path, int):
        return None  # a file descriptor the script already holds
    try:
        p = os.fspath(path)
    except TypeError:
        return None
    p = os.fsdecode(p) if isinstance(p, bytes) else p
    if follow:
        return os.path.realpath(p)
    head, name = os.path.split(os.path.abspath(p))
    return os.path.join(os.path.realpath(head), name) if name not in ("", ".", "..") else os.path.realpath(p)


class Sandbox:
    def __init__(self, run_dir: str, note, also_allowed: tuple[str, ...] = (), sources: dict | None = None):
        self.root = os.path.realpath(run_dir)
        self.out = os.path.join(self.root, "outputs")
        self.own = [self.root, "/dev", "/proc", *(os.path.realpath(a) for a in (*also_allowed, *library_caches()))]
        self.note = note
        # the patched copies read in place of the user's files (the verification), as if written here
        self.sources = {os.path.realpath(k): os.path.realpath(v) for k, v in (sources or {}).items()}
        self.redirected: dict[str, str] = dict(self.sources)
        self.deleted: set[str] = set()        # the user's files a delete left in place
        self.hidden: set[str] = set()         # what the baseline created: absent here (hide)
        self.events: dict[tuple[str, str], dict] = {}
        self.fresh: set[str] = set()          # files the script made with tempfile.mkstemp
        self.passing = threading.local()      # .on: a call advisor trusts is under way (tempfile's own)
        self.kind = os.environ.get("ADVISOR_SANDBOX") or "python"
        self.why = os.environ.get("ADVISOR_SANDBOX_WHY")
        try:
            self.layers = json.loads(os.environ.get("ADVISOR_SANDBOX_LAYERS") or "[]")
            self.split = json.loads(os.environ.get("ADVISOR_SANDBOX_SPLIT") or "[]")
        except ValueError:
            self.layers, self.split = [], []

    def hide(self, paths) -> None:
        """The paths the baseline created and did not read back (runner/created.py): absent in
        this process, as before the baseline, so that it starts from the tree the baseline
        found. A write there makes the sandbox's own copy."""
        new = {os.path.abspath(p) for p in paths or ()} - self.hidden
        new = {p for p in new if not _under(p, self.own)}
        self.hidden |= new
        self.deleted |= new

    def hide_from(self, file: str | None) -> None:
        """hide() what the baseline's record at ``file`` lists, where it has one."""
        if not file:
            return
        try:
            with _real_fns().get("open", open)(file, encoding="utf-8") as f:
                self.hide(json.load(f).get("hidden") or [])
        except (OSError, ValueError, AttributeError):
            pass

    def allow(self, path, make: bool = False) -> None:
        """Writes under `path` go where asked (the script's own profiler traces, a fresh
        temporary directory); `make`: the directory is made now, as the script's code would
        (os.makedirs recursing into a parent would otherwise be redirected, and the write under
        it find no directory)."""
        full = real(path)
        if full is None:
            return
        self.own.append(full)
        if make:  # one os.mkdir a level: os.makedirs recurses through the redirecting os.makedirs
            missing = []
            while full and not os.path.isdir(full) and full != os.path.dirname(full):
                missing.append(full)
                full = os.path.dirname(full)
            from advisor.runner.sandbox_hooks import REAL

            for d in reversed(missing):
                REAL.get("mkdir", os.mkdir)(d)

    def relocate(self, run_dir: str) -> None:
        """The run directory was renamed (a process started ahead takes its trial's name)."""
        old, self.root = self.root, os.path.realpath(run_dir)
        self.out = os.path.join(self.root, "outputs")
        self.own[0] = self.root
        self.redirected = {k: self.root + v[len(old):] if v.startswith(old + os.sep) else v
                           for k, v in self.redirected.items()}
        for ev in self.events.values():
            if ev.get("to", "").startswith(old + os.sep):
                ev["to"] = self.root + ev["to"][len(old):]

    def read_target(self, path):
        full = real(path)
        if full is None:
            return path
        copy = self.copy_of(full) if full in self.redirected else None
        if copy is None and full in self.deleted:
            raise FileNotFoundError(2, "No such file or directory (deleted in the sandbox)", os.fspath(path))
        return copy or path

    def judge(self, path, follow: bool = True) -> tuple[str | None, str | None]:
        """(the real path, where a change to it goes: None when it may go where asked)."""
        full = real(path, follow)
        if full is None or full in self.fresh or getattr(self.passing, "on", False) or _under(full, self.own):
            return full, None
        return full, self.redirected.get(full) or os.path.join(self.out, full.lstrip(os.sep))

    def redirect_of(self, full: str) -> str:
        """Where a change to the user's path ``full`` goes (it may not exist yet)."""
        return self.redirected.get(full) or os.path.join(self.out, full.lstrip(os.sep))

    def view(self, path, follow: bool = True):
        """The path to look at for what the script sees at `path`: its redirected copy where one
        exists (under a directory the sandbox redirected, or the path itself); a user's file
        deleted in the sandbox raises FileNotFoundError; else `path`. Cheap where nothing was
        redirected under it (a string's parents against the redirected paths, no syscall)."""
        if not self.redirected and not self.deleted:
            return path
        try:
            p = os.fspath(path)
        except TypeError:
            return path
        p = os.fsdecode(p) if isinstance(p, bytes) else p
        a = os.path.abspath(p)
        if not self._near(a):
            return path
        full = real(path, follow)
        if full is None:
            return path
        copy = self.redirect_of(full)
        try:
            _real_fns().get("lstat", os.lstat)(copy)
            return copy
        except OSError:
            pass
        if self.deleted_at(full):
            raise FileNotFoundError(2, "No such file or directory (deleted in the sandbox)", p)
        return path

    def deleted_at(self, full: str) -> bool:
        """Was the user's path `full`, or a directory above it, deleted in the sandbox (or hidden)?"""
        return bool(self.deleted) and at_or_above(full, self.deleted.__contains__) is not None

    def _near(self, a: str) -> bool:
        """Is the absolute path `a`, or a directory above it, a redirected or deleted path?"""
        return at_or_above(a, lambda p: p in self.redirected or p in self.deleted) is not None

    def copy_of(self, full: str) -> str | None:
        """The redirected copy of a user's path, when one was written."""
        dest = self.redirected.get(full)
        return dest if dest is not None and os.path.lexists(dest) else None

    def target(self, path, op: str = "write", follow: bool = True) -> str | None:
        """Where a write to `path` really goes, or None when it may go where asked."""
        full, dest = self.judge(path, follow)
        if dest is None:
            return None
        if full not in self.redirected:
            self.redirected[full] = dest
            self.note(f"trial write redirected: {os.fspath(path)} -> {os.path.relpath(dest, self.root)}")
        self.record(op, full, dest)
        return dest

    def record(self, op: str, full: str, dest: str | None = None) -> None:
        """One entry of child.json sandbox.redirected per (op, path)."""
        if (op, full) not in self.events:
            self.events[(op, full)] = {"op": op, "path": full, **({"to": dest} if dest else {})}

    def suppress(self, op: str, full: str) -> None:
        """A change to a user's file that is not done (a delete, a chmod)."""
        if (op, full) not in self.events:
            self.note(f"trial {op} of the user's {full} not done (sandbox)")
        self.record(op, full)

    def install(self) -> None:
        from advisor.runner.sandbox_hooks import install

        install(self)

    def doc(self) -> dict:
        """child.json ``sandbox``: which sandbox ran, what it redirected or left undone, and
        what the copy-on-write layer took in."""
        out = {"kind": self.kind, "redirected": list(self.events.values())[:LIST_MAX],
               "redirected_total": len(self.events)}
        if self.why:
            out["why"] = self.why
        if self.hidden:
            out["hidden"] = sorted(self.hidden)[:LIST_MAX]   # what the baseline made: absent here
        if self.kind == "overlay":
            out["not_overlaid_whole"] = self.split   # a new entry directly in one: the hooks alone
            absorbed = absorbed_changes(self.layers)
            out["absorbed"], out["absorbed_total"] = absorbed[:LIST_MAX], len(absorbed)
        return out


def _real_fns() -> dict:
    from advisor.runner.sandbox_hooks import REAL

    return REAL


def absorbed_changes(layers: list[dict]) -> list[dict]:
    """What the copy-on-write layers hold: each file written ("write") or deleted ("delete")
    under an overlaid directory, by its real path (compiled-bytecode caches left out)."""
    out = []
    for layer in layers:
        upper, target = layer.get("upper"), layer.get("target")
        if not upper or not target or not os.path.isdir(upper):
            continue
        for top, dirs, files in os.walk(upper):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                p = os.path.join(top, name)
                try:
                    st = os.lstat(p)
                except OSError:
                    continue
                whiteout = stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
                out.append({"op": "delete" if whiteout else "write",
                            "path": os.path.join(target, os.path.relpath(p, upper))})
    return sorted(out, key=lambda e: e["path"])


def enter_spawned(state_path: str) -> None:
    """In a process multiprocessing spawned from a sandboxed one: the parent's sandbox, installed
    before the child imports the script's main module (sandbox_hooks._install_spawned)."""
    try:
        with open(state_path, encoding="utf-8") as f:
            state = json.load(f)
    except (OSError, ValueError):
        return
    sb = Sandbox(state["run_dir"], lambda text: None, also_allowed=tuple(state.get("own") or ()),
                 sources=state.get("sources"))
    sb.hide(state.get("hidden"))
    sb.install()
