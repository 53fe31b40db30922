"""The calls the Python-level sandbox (runner/sandbox.py) takes over, each turned onto the run
directory or left undone by its policy. ``REAL`` keeps the originals, for advisor's own use."""

from __future__ import annotations

import builtins
import io
import os
import pathlib
import shutil
import tempfile

from advisor.runner.sandbox import _WRITE_CHARS, Sandbox, real

REAL: dict = {}


def _keep(name: str, fn):
    REAL.setdefault(name, fn)
    return REAL[name]


def _make_parent(dest: str) -> None:
    REAL["makedirs"](os.path.dirname(dest), exist_ok=True)


def _lexists(path) -> bool:
    """os.path.lexists of the real filesystem, past the view (advisor's own checks)."""
    try:
        REAL.get("lstat", os.lstat)(path)
        return True
    except (OSError, ValueError):
        return False


def _isdir(path, follow: bool = True) -> bool:
    import stat as st

    try:
        return st.S_ISDIR((REAL.get("stat", os.stat) if follow else REAL.get("lstat", os.lstat))(path).st_mode)
    except (OSError, ValueError):
        return False


def _copy_up(path, dest: str) -> None:
    """The redirected copy starts as the user's file (an append, a truncate, a rename): what
    ``path`` names, a symbolic link itself when it is one (callers pass the resolved path to
    copy what a link points to)."""
    if not _lexists(dest) and _lexists(path):
        _make_parent(dest)
        if _isdir(path, follow=False):
            REAL["copytree"](path, dest, symlinks=True, dirs_exist_ok=True, copy_function=REAL["copy2"])
        else:
            REAL["copy2"](path, dest, follow_symlinks=False)


def _copy_up_seen(sb: Sandbox, full, dest: str) -> None:
    """_copy_up of a user's file the script still sees: one deleted in the sandbox (or hidden:
    the baseline made it) starts empty, as a new file would."""
    if full is not None and not sb.deleted_at(full):
        _copy_up(full, dest)


def install(sb: Sandbox) -> None:
    _install_view(sb)
    _install_sources(sb)
    _install_open(sb)
    _install_dirs(sb)
    _install_deletes(sb)
    _install_moves(sb)
    _install_links_and_attrs(sb)
    _install_tempfile(sb)
    _install_savers(sb)
    _install_spawned(sb)


def _install_open(sb: Sandbox) -> None:
    real_open = _keep("open", builtins.open)

    def open_(file, mode="r", *args, **kwargs):
        if kwargs.get("opener") is not None and isinstance(file, (str, os.PathLike)) and _isdir(file):
            pass   # a directory opened through an opener: tempfile.TemporaryFile's nameless file
        elif _WRITE_CHARS & set(str(mode)):
            dest = sb.target(file)
            if dest is not None:
                _make_parent(dest)
                if "w" not in str(mode) and "x" not in str(mode):   # append, r+: the user's text first
                    _copy_up_seen(sb, real(file), dest)
                file = dest
        elif sb.redirected or sb.deleted:
            file = sb.read_target(file)
        return real_open(file, mode, *args, **kwargs)

    builtins.open = open_
    io.open = open_

    real_os_open = _keep("os.open", os.open)

    tmpfile = getattr(os, "O_TMPFILE", 0)

    def os_open(path, flags, mode=0o777, *, dir_fd=None):
        if tmpfile and flags & tmpfile == tmpfile:   # a nameless file (tempfile.TemporaryFile): nothing is written
            return real_os_open(path, flags, mode, dir_fd=dir_fd)
        if dir_fd is None and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND):
            dest = sb.target(path)
            if dest is not None:
                _make_parent(dest)
                if not flags & os.O_TRUNC:   # a write into the user's file starts from its text
                    _copy_up_seen(sb, real(path), dest)
                path = dest
        elif dir_fd is None and (sb.redirected or sb.deleted):
            path = sb.read_target(path)
        return real_os_open(path, flags, mode, dir_fd=dir_fd)

    os.open = os_open

    def path_open(self, mode="r", *args, **kwargs):
        return open_(self, mode, *args, **kwargs)

    pathlib.Path.open = path_open


def _install_dirs(sb: Sandbox) -> None:
    real_makedirs, real_mkdir = _keep("makedirs", os.makedirs), _keep("mkdir", os.mkdir)
    real_path_mkdir = _keep("Path.mkdir", pathlib.Path.mkdir)

    def makedirs(name, *args, **kwargs):
        if _real_dir(sb, name):   # nothing to make: exist_ok returns, else FileExistsError, as real
            return real_makedirs(name, *args, **kwargs)
        dest = sb.target(name, op="mkdir")
        if dest is not None:
            return real_makedirs(dest, *args, **kwargs)
        # let through (a library's cache): its missing parents are made where asked too, not
        # redirected one level at a time by os.makedirs' recursion into this hook
        was, sb.passing.on = getattr(sb.passing, "on", False), True
        try:
            return real_makedirs(name, *args, **kwargs)
        finally:
            sb.passing.on = was

    def mkdir(path, *args, **kwargs):
        if kwargs.get("dir_fd") is None and _real_dir(sb, path):
            return real_mkdir(path, *args, **kwargs)   # FileExistsError, as real
        dest = sb.target(path, op="mkdir") if kwargs.get("dir_fd") is None else None
        if dest is None:
            return real_mkdir(path, *args, **kwargs)
        _make_parent(dest)
        return real_mkdir(dest, *args, **kwargs)

    def path_mkdir(self, mode=0o777, parents=False, exist_ok=False):
        if _real_dir(sb, self):
            return real_path_mkdir(self, mode, parents, exist_ok)
        dest = sb.target(self, op="mkdir")
        if dest is None:
            return real_path_mkdir(self, mode, parents, exist_ok)
        real_makedirs(dest, exist_ok=True)

    os.makedirs, os.mkdir, pathlib.Path.mkdir = makedirs, mkdir, path_mkdir


def _real_dir(sb: Sandbox, path) -> bool:
    """A directory of the user's that exists (and was not deleted in the sandbox): making it
    again changes nothing, and fails or not as it would for real."""
    full = real(path)
    return full is not None and not sb.deleted_at(full) and full not in sb.redirected \
        and _isdir(full) and not _lexists(sb.redirect_of(full))


def _delete(sb: Sandbox, path, op: str, real_fn, dir_fd=None) -> None:
    """A delete: the redirected copy goes; a user's file stays, and reads as deleted. A path
    relative to a directory descriptor (shutil.rmtree's own walk) is not judged again."""
    full, dest = sb.judge(path, follow=False) if dir_fd is None else (None, None)
    if dest is None:
        return real_fn(path)
    copy = sb.copy_of(full)
    if copy is not None:
        real_fn(copy)
        sb.redirected.pop(full, None)
        sb.record(op, full, copy)
    elif _lexists(full) and not sb.deleted_at(full):
        sb.suppress(op, full)
    else:
        raise FileNotFoundError(2, "No such file or directory", os.fspath(path))
    sb.deleted.add(full)


def _install_deletes(sb: Sandbox) -> None:
    real_remove, real_rmdir = _keep("remove", os.remove), _keep("rmdir", os.rmdir)
    real_rmtree = _keep("rmtree", shutil.rmtree)

    def remove(path, *args, **kwargs):
        return _delete(sb, path, "delete", lambda p: real_remove(p, *args, **kwargs), kwargs.get("dir_fd"))

    def rmdir(path, *args, **kwargs):
        return _delete(sb, path, "delete", lambda p: real_rmdir(p, *args, **kwargs), kwargs.get("dir_fd"))

    def removedirs(name):
        rmdir(name)
        head = os.path.dirname(os.fspath(name))
        while head:
            try:
                rmdir(head)
            except OSError:
                break
            head = os.path.dirname(head)

    def rmtree(path, *args, **kwargs):
        return _delete(sb, path, "delete", lambda p: real_rmtree(p, *args, **kwargs))

    os.remove = os.unlink = remove
    os.rmdir, os.removedirs, shutil.rmtree = rmdir, removedirs, rmtree

    def path_unlink(self, missing_ok=False):
        try:
            remove(self)
        except FileNotFoundError:
            if not missing_ok:
                raise

    pathlib.Path.unlink = path_unlink
    pathlib.Path.rmdir = lambda self: rmdir(self)


def _move(sb: Sandbox, src, dst, real_fn, op: str):
    """A rename or move: onto the redirected destination; a user's file is copied, not moved."""
    src_full, src_dest = sb.judge(src, follow=False)
    if src_dest is not None and sb.copy_of(src_full) is None:   # the user's own file
        if not _lexists(src_full) or sb.deleted_at(src_full):
            raise FileNotFoundError(2, "No such file or directory", os.fspath(src))
        to = sb.target(dst, op=op, follow=False) or os.fspath(dst)
        _copy_up(src_full, to)
        sb.suppress("delete", src_full)
        sb.deleted.add(src_full)
        return to
    dst_t = sb.target(dst, op=op, follow=False)
    if dst_t is not None:
        _make_parent(dst_t)
    out = real_fn(sb.copy_of(src_full) or src if src_dest is not None else src, dst_t or dst)
    if src_dest is not None:
        sb.redirected.pop(src_full, None)
        sb.deleted.add(src_full)
    return out


def _install_moves(sb: Sandbox) -> None:
    real_rename, real_replace = _keep("rename", os.rename), _keep("replace", os.replace)
    real_move = _keep("move", shutil.move)

    def on_move(real_fn, op):
        def fn(src, dst, *a, **k):
            if k.get("src_dir_fd") is not None or k.get("dst_dir_fd") is not None:
                return real_fn(src, dst, *a, **k)
            return _move(sb, src, dst, lambda s, d: real_fn(s, d, *a, **k), op)
        return fn

    os.rename, os.replace = on_move(real_rename, "rename"), on_move(real_replace, "rename")
    shutil.move = lambda src, dst, *a, **k: _move(sb, src, dst, lambda s, d: real_move(s, d, *a, **k), "move")

    def path_rename(self, target):
        _move(sb, self, target, real_rename, "rename")
        return type(self)(target)

    def path_replace(self, target):
        _move(sb, self, target, real_replace, "rename")
        return type(self)(target)

    pathlib.Path.rename, pathlib.Path.replace = path_rename, path_replace
    for name in ("copy", "copy2", "copyfile", "copytree"):
        real_fn = _keep(name, getattr(shutil, name))

        def copy(src, dst, *a, _fn=real_fn, **k):
            dest = sb.target(dst, op="copy")
            if dest is not None:
                _make_parent(dest)
            return _fn(sb.read_target(src), dest or dst, *a, **k)

        setattr(shutil, name, copy)


def _install_links_and_attrs(sb: Sandbox) -> None:
    real_symlink, real_link = _keep("symlink", os.symlink), _keep("link", os.link)

    def symlink(src, dst, *args, **kwargs):
        dest = sb.target(dst, op="symlink", follow=False)
        if dest is not None:
            _make_parent(dest)
        return real_symlink(src, dest or dst, *args, **kwargs)

    def link(src, dst, *args, **kwargs):
        dest = sb.target(dst, op="link", follow=False)
        if dest is not None:
            _make_parent(dest)
        return real_link(sb.read_target(src), dest or dst, *args, **kwargs)

    os.symlink, os.link = symlink, link
    pathlib.Path.symlink_to = lambda self, target, target_is_directory=False: symlink(target, self,
                                                                                      target_is_directory)
    pathlib.Path.hardlink_to = lambda self, target: link(target, self)

    def on_copy(op: str, real_fn):
        def fn(path, *args, **kwargs):
            if isinstance(path, int):
                return real_fn(path, *args, **kwargs)
            dest = sb.target(path, op=op)
            if dest is None:
                return real_fn(path, *args, **kwargs)
            if _lexists(dest) or op == "truncate":
                _copy_up(real(path), dest)
                return real_fn(dest, *args, **kwargs)
            sb.suppress(op, real(path))
        return fn

    os.truncate = on_copy("truncate", _keep("truncate", os.truncate))
    os.chmod = on_copy("chmod", _keep("chmod", os.chmod))
    os.utime = on_copy("utime", _keep("utime", os.utime))
    pathlib.Path.chmod = lambda self, mode, *, follow_symlinks=True: os.chmod(self, mode)

    real_touch = _keep("touch", pathlib.Path.touch)

    def touch(self, mode=0o666, exist_ok=True):
        dest = sb.target(self, op="write")
        if dest is None:
            return real_touch(self, mode, exist_ok)
        _make_parent(dest)
        _copy_up_seen(sb, real(self), dest)
        return real_touch(pathlib.Path(dest), mode, exist_ok)

    pathlib.Path.touch = touch


class _Entries:
    """os.scandir's iterator over two directories: the user's and its redirected copy (the
    copy's entry where a name is in both), less what was deleted in the sandbox."""

    def __init__(self, real_it, copy_it, deleted):
        self._copy, self._real = copy_it, real_it
        self._deleted = deleted

    def __iter__(self):
        seen = set()
        for entry in self._copy or ():
            seen.add(entry.name)
            yield entry
        for entry in self._real or ():
            if entry.name not in seen and entry.name not in self._deleted:
                yield entry

    def close(self):
        for it in (self._copy, self._real):
            if it is not None:
                it.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def _install_view(sb: Sandbox) -> None:
    """The script sees what it wrote: a path redirected (a directory a library made, a file
    written) is stat'ed, listed and tested where its copy lies, and a user's file deleted in the
    sandbox is gone; ``os.path.exists``, ``isdir``, ``pathlib``'s ``exists``/``iterdir`` and
    ``glob`` read through these. Without it, ``if not os.path.exists(d): os.makedirs(d)`` after
    TensorBoard's writer made ``d`` failed with FileExistsError."""
    real_stat, real_lstat = _keep("stat", os.stat), _keep("lstat", os.lstat)
    real_listdir, real_scandir = _keep("listdir", os.listdir), _keep("scandir", os.scandir)
    real_access = _keep("access", os.access)

    def on_stat(real_fn, follow: bool):
        def fn(path, *args, dir_fd=None, **kwargs):
            if dir_fd is None and not isinstance(path, int):
                path = sb.view(path, follow=follow)
            return real_fn(path, *args, dir_fd=dir_fd, **kwargs)
        return fn

    os.stat, os.lstat = on_stat(real_stat, True), on_stat(real_lstat, False)

    def access(path, mode, *args, dir_fd=None, **kwargs):
        if dir_fd is None and not isinstance(path, int):
            path = sb.view(path)
        return real_access(path, mode, *args, dir_fd=dir_fd, **kwargs)

    os.access = access

    def both(path):
        """(the user's directory, its copy or None, the names deleted in it)."""
        full = real(path)
        copy = sb.redirect_of(full) if full is not None and sb.redirected else None
        if copy is not None and not _isdir(copy):
            copy = None
        gone = {os.path.basename(d) for d in sb.deleted if full is not None and os.path.dirname(d) == full}
        if copy is None and full is not None and sb.deleted_at(full):
            raise FileNotFoundError(2, "No such file or directory (deleted in the sandbox)", os.fspath(path))
        return copy, gone

    def listdir(path="."):
        if isinstance(path, int) or not (sb.redirected or sb.deleted):
            return real_listdir(path)
        copy, gone = both(path)
        if copy is None and not gone:
            return real_listdir(path)
        mine = real_listdir(copy) if copy else []   # what the script wrote there, deleted again or not
        names = [n for n in (real_listdir(path) if _isdir(path) else []) if n not in gone]
        return list(dict.fromkeys([*mine, *names]))

    def scandir(path="."):
        if isinstance(path, int) or not (sb.redirected or sb.deleted):
            return real_scandir(path)
        copy, gone = both(path)
        if copy is None and not gone:
            return real_scandir(path)
        return _Entries(real_scandir(path) if _isdir(path) else None, real_scandir(copy) if copy else None, gone)

    os.listdir, os.scandir = listdir, scandir


def _install_sources(sb: Sandbox) -> None:
    """The verification's patched files are imported under their own paths: the source and its
    size and time are read from the patched copy (a cached bytecode of the user's text then no
    longer matches, and the patched text is compiled)."""
    if not sb.sources:
        return
    from importlib.machinery import SourceFileLoader

    real_get_data = _keep("SourceFileLoader.get_data", SourceFileLoader.get_data)
    real_stats = _keep("SourceFileLoader.path_stats", SourceFileLoader.path_stats)

    def copy(path):
        return sb.sources.get(os.path.realpath(path), path) if isinstance(path, str) else path

    SourceFileLoader.get_data = lambda self, path: real_get_data(self, copy(path))
    SourceFileLoader.path_stats = lambda self, path: real_stats(self, copy(path))
    # runpy's run_path (a spawned worker's __main__) and bootstrap read the script through it
    real_open_code = _keep("io.open_code", io.open_code)
    io.open_code = lambda path: real_open_code(copy(path))


def _install_tempfile(sb: Sandbox) -> None:
    """What the script makes with ``tempfile`` in this process is its own scratch space."""
    real_mkdtemp, real_inner = _keep("mkdtemp", tempfile.mkdtemp), _keep("_mkstemp_inner", tempfile._mkstemp_inner)

    def named(dir) -> bool:
        """A directory the caller named, not the temporary directory itself."""
        return dir is not None and real(dir) != os.path.realpath(tempfile.gettempdir())

    def mkdtemp(suffix=None, prefix=None, dir=None):
        dest = sb.target(dir, op="mkdir") if named(dir) else None
        if dest is not None:   # asked for inside the user's tree: made in the redirected copy
            REAL["makedirs"](dest, exist_ok=True)
            dir = dest
        sb.passing.on = True   # its os.mkdir makes a fresh directory of its own
        try:
            path = real_mkdtemp(suffix, prefix, dir)
        finally:
            sb.passing.on = False
        sb.allow(path)
        return path

    def mkstemp_inner(dir, *args, **kwargs):
        dest = sb.target(dir, op="mkdir") if named(dir) else None
        if dest is not None:   # asked for inside the user's tree: made in the redirected copy
            REAL["makedirs"](dest, exist_ok=True)
            dir = dest
        sb.passing.on = True   # its os.open makes a fresh file of its own
        try:
            fd, path = real_inner(dir, *args, **kwargs)
        finally:
            sb.passing.on = False
        sb.fresh.add(os.path.realpath(path))
        return fd, path

    tempfile.mkdtemp, tempfile._mkstemp_inner = mkdtemp, mkstemp_inner


def _saver(sb: Sandbox, real_fn, at: int = 0):
    """A saver whose target path (its ``at``-th argument) is redirected: native code writes it,
    past the ``open`` hook."""
    def save_to(*args, **kwargs):
        if len(args) > at:
            args = (*args[:at], _save_path(sb, args[at]), *args[at + 1:])
        elif "filename" in kwargs:
            kwargs["filename"] = _save_path(sb, kwargs["filename"])
        return real_fn(*args, **kwargs)

    return save_to


def _save_path(sb: Sandbox, f):
    if isinstance(f, (str, bytes, os.PathLike)):
        dest = sb.target(f)
        if dest is not None:
            _make_parent(dest)
            return dest
    return f


SPAWNED = "sandbox-spawned.json"   # in the run directory: what a spawned child's sandbox needs


def _install_spawned(sb: Sandbox) -> None:
    """A process multiprocessing starts with ``spawn`` (or its forkserver) is a fresh interpreter:
    a DataLoader with ``multiprocessing_context="spawn"``, a script's own worker pool. Its command
    line is turned so that the same sandbox (and the verification's patched sources) is installed
    before it runs anything of the script's (sandbox.enter_spawned)."""
    import json
    import multiprocessing.spawn as spawn

    state = os.path.join(sb.root, SPAWNED)
    try:
        with REAL["open"](state, "w", encoding="utf-8") as f:
            json.dump({"run_dir": sb.root, "own": sb.own, "sources": sb.sources, "hidden": sorted(sb.hidden)}, f)
    except OSError:
        return
    real_cmd = _keep("multiprocessing.spawn.get_command_line", spawn.get_command_line)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

    def get_command_line(**kwds):
        cmd = list(real_cmd(**kwds))
        if "-c" in cmd:
            i = cmd.index("-c") + 1
            cmd[i] = (f"import sys; sys.path.insert(0, {root!r}); from advisor.runner.sandbox import enter_spawned; "
                      f"sys.path.remove({root!r}); enter_spawned({state!r}); {cmd[i]}")
        return cmd

    spawn.get_command_line = get_command_line


def _forced_saver(sb: Sandbox, real_fn):
    """A saver whose target (its first argument) is redirected."""
    def save_to(f, *args, **kwargs):
        if isinstance(f, (str, bytes, os.PathLike)):
            dest = sb.target(f)
            if dest is not None:
                _make_parent(dest)
                f = dest
        return real_fn(f, *args, **kwargs)

    return save_to


def _install_savers(sb: Sandbox) -> None:
    import torch

    real_save = _keep("torch.save", torch.save)

    def save(obj, f, *args, **kwargs):
        return _forced_saver(sb, lambda f_, *a, **k: real_save(obj, f_, *a, **k))(f, *args, **kwargs)

    torch.save = save
    try:
        import numpy as np
    except ImportError:
        return
    for name in ("save", "savez", "savez_compressed", "savetxt"):
        setattr(np, name, _forced_saver(sb, _keep(f"numpy.{name}", getattr(np, name))))
    _install_safetensors(sb)


def _install_safetensors(sb: Sandbox) -> None:
    """safetensors writes its files from Rust: ``save_file(tensors, filename)`` is turned here
    (Hugging Face's save_pretrained and Lightning call it). Only where it is installed; imported
    now, before the script, so that the script's ``from safetensors.torch import save_file``
    takes the turned one."""
    import importlib
    import importlib.util

    if importlib.util.find_spec("safetensors") is None:
        return
    for mod_name in ("safetensors.torch", "safetensors.numpy"):
        try:
            mod = importlib.import_module(mod_name)
        except Exception:   # noqa: BLE001 - a broken install is the script's to meet
            continue
        if hasattr(mod, "save_file"):
            mod.save_file = _saver(sb, _keep(f"{mod_name}.save_file", mod.save_file), at=1)
