"""The OS-level sandbox: ``python jail.py --root RUN_DIR [--pass DIR]... -- COMMAND...``.

Runs COMMAND (advisor's child) in its own user and mount namespaces where every writable
directory of the machine is a copy-on-write overlay: the child and everything it starts read
the real files, and whatever they write, delete or rename lands in a layer in memory that is
gone when they end. Only the run directory (``--root``, advisor's own outputs) and library
caches (``--pass``: compiled kernels worth keeping across trials) stay the real ones. /proc,
/sys, /dev (the GPU's device nodes, /dev/shm) and /run are not overlaid.

Needs Linux with unprivileged user namespaces and overlayfs in them (kernel 5.11+). Where
they are missing or refused (clusters often forbid user namespaces), COMMAND runs as it is
and the Python-level hooks (runner/sandbox.py) are the only sandbox; the environment tells
the child which one it got (ADVISOR_SANDBOX: "overlay" or "python", ADVISOR_SANDBOX_WHY).

Standard library only, and nothing imported from advisor: it runs before the child's Python
starts, single-threaded, as unshare(2) of a user namespace requires.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_RDONLY, MS_BIND, MS_REC, MS_PRIVATE = 1, 4096, 16384, 1 << 18
KIND_ENV, WHY_ENV, LAYERS_ENV = "ADVISOR_SANDBOX", "ADVISOR_SANDBOX_WHY", "ADVISOR_SANDBOX_LAYERS"
SPLIT_ENV = "ADVISOR_SANDBOX_SPLIT"   # directories not overlaid whole (they hold mounts)
UPPER_DIR = ".sandbox"     # under --root: where the memory layer is seen from inside
FORCE_ENV = "ADVISOR_SANDBOX_FORCE"   # "python": skip the overlay (tests of the fallback)
# Never overlaid: the kernel's views, devices (GPUs, shared memory) and sockets of services.
_KEEP = ("/proc", "/sys", "/dev", "/run")
_PSEUDO = {"proc", "sysfs", "devtmpfs", "devpts", "mqueue", "cgroup", "cgroup2", "debugfs", "tracefs",
           "securityfs", "bpf", "fusectl", "configfs", "pstore", "hugetlbfs", "autofs", "binfmt_misc",
           "nsfs", "efivarfs", "rpc_pipefs", "selinuxfs"}


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes."""
    for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, ch)
    return field


def mounts(mountinfo: str) -> tuple[list[str], list[str]]:
    """(mount points of writable, real filesystems; all other mount points), outside _KEEP."""
    writable, other = [], []
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) < 6 or not r:
            continue
        point, opts, fstype = _unescape(f[4]), f[5].split(","), r[0]
        if _under(point, _KEEP):
            continue
        (other if "ro" in opts or fstype in _PSEUDO else writable).append(point)
    return sorted(set(writable)), sorted(set(other) - set(writable))


def _under(path: str, dirs) -> bool:
    return any(path == d or path.startswith(d.rstrip("/") + "/") for d in dirs)


def targets(writable: list[str], other: list[str]) -> tuple[list[str], list[str]]:
    """(the directories to overlay, shallowest first; directories left as they are because
    mounts lie inside them). An overlay cannot be mounted over a directory that holds other
    mounts (the kernel refuses: they would be hidden), so such a directory is split into its
    subdirectories, down to the mounts, which are overlaid at their own roots when writable.
    The root filesystem is split so too: / itself cannot be overlaid in place."""
    points = [p for p in (*writable, *other) if p != "/"]
    todo = ["/", *(m for m in writable if m != "/")]
    out, split = [], []
    while todo:
        d = todo.pop()
        if d != "/" and (_under(d, _KEEP) or os.path.islink(d) or not os.path.isdir(d) or d in other):
            continue
        if d == "/" or any(_under(p, [d]) and p != d for p in points):
            split.append(d)
            try:
                names = os.listdir(d)
            except OSError:
                continue
            todo += [os.path.join(d, n) for n in names if os.path.join(d, n) not in writable]
        elif d not in out:
            out.append(d)
    return sorted(out, key=lambda p: (p.count("/"), p)), sorted(split)


class _Libc:
    def __init__(self):
        self.c = ctypes.CDLL(None, use_errno=True)
        self.mounted: list[str] = []

    def _ok(self, rc: int, what: str) -> None:
        if rc != 0:
            e = ctypes.get_errno()
            raise OSError(e, f"{what}: {os.strerror(e)}")

    def unshare(self, flags: int) -> None:
        self._ok(self.c.unshare(flags), "unshare")

    def mount(self, src, target: str, fstype, flags: int, data) -> None:
        enc = (lambda s: None if s is None else os.fsencode(s))
        self._ok(self.c.mount(enc(src), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
                 f"mount {fstype or 'bind'} on {target}")
        self.mounted.append(target)

    def undo(self) -> None:
        """Detach what was mounted, newest first: the view is the real one again."""
        while self.mounted:
            self.c.umount2(os.fsencode(self.mounted.pop()), 2)   # MNT_DETACH


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def enter(root: str, passes: list[str]) -> tuple[list[dict], list[str]]:
    """Make this process's view of the filesystem copy-on-write (see the module docstring);
    returns the layers as [{"upper": path seen from inside, "target": overlaid directory}] and
    the directories split into their subdirectories (a new entry directly in one of those is
    not in a layer). Raises OSError where the machine does not allow it."""
    if not sys.platform.startswith("linux"):
        raise OSError("user namespaces are Linux's")
    with open("/proc/self/mountinfo") as f:
        writable, other = mounts(f.read())
    dirs, split = targets(writable, other)
    root = os.path.realpath(root)
    passes = [os.path.realpath(p) for p in passes if os.path.isdir(p)]
    # Handles on the real directories, taken before any overlay hides them.
    uid, gid, cwd = os.geteuid(), os.getegid(), os.getcwd()
    libc = _Libc()
    try:
        libc.unshare(CLONE_NEWUSER | CLONE_NEWNS)
        _write("/proc/self/setgroups", "deny")
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
        # nothing mounted here reaches the host's namespace
        libc.c.mount(None, b"/", None, ctypes.c_ulong(MS_REC | MS_PRIVATE), None)
        return _layer(libc, dirs, root, passes), [d for d in split if d != "/"]
    except OSError:
        libc.undo()
        raise
    finally:
        os.chdir(cwd)   # the old working directory handle is the real one: look it up again


def _layer(libc: _Libc, dirs: list[str], root: str, passes: list[str]) -> list[dict]:
    mem = os.path.join(root, UPPER_DIR)
    os.makedirs(mem, exist_ok=True)
    libc.mount("advisor-sandbox", mem, "tmpfs", 0, "mode=0700")
    mem_fd = os.open(mem, os.O_PATH | os.O_DIRECTORY)
    at = f"/proc/self/fd/{mem_fd}"   # the memory layer, wherever overlays hide its path
    try:
        for i, d in enumerate(dirs):   # each lower seen alone (no submounts), before any overlay
            for sub in (f"l{i}", f"u{i}", f"w{i}"):
                os.mkdir(f"{at}/{sub}")
            libc.mount(d, f"{at}/l{i}", None, MS_BIND, None)
        real = [root, *passes]     # kept real: stashed too, and bound again over their overlays
        for k, p in enumerate(real):
            os.mkdir(f"{at}/r{k}")
            libc.mount(p, f"{at}/r{k}", None, MS_BIND, None)
        layers = []
        for i, d in enumerate(dirs):
            libc.mount("advisor-overlay", d, "overlay", 0,
                       f"lowerdir={at}/l{i},upperdir={at}/u{i},workdir={at}/w{i}")
            layers.append({"upper": os.path.join(mem, f"u{i}"), "target": d})
        for k, p in enumerate(real):
            libc.mount(f"{at}/r{k}", p, None, MS_BIND, None)
        libc.mount(f"{at}/.", mem, None, MS_BIND, None)   # the layers, seen from inside
        return layers
    finally:
        os.close(mem_fd)


def main(argv: list[str]) -> None:
    sep = argv.index("--")
    opts, command = argv[:sep], argv[sep + 1:]
    root = opts[opts.index("--root") + 1]
    passes = [opts[i + 1] for i, a in enumerate(opts) if a == "--pass"]
    env = dict(os.environ)
    try:
        if env.get(FORCE_ENV) == "python":
            raise OSError(f"{FORCE_ENV}=python")
        layers, split = enter(root, passes)
        env[KIND_ENV], env[LAYERS_ENV], env[SPLIT_ENV] = "overlay", json.dumps(layers), json.dumps(split)
    except (OSError, ValueError) as e:
        env[KIND_ENV], env[WHY_ENV] = "python", f"no copy-on-write view of the filesystem ({e})"
        env.pop(LAYERS_ENV, None)
        env.pop(SPLIT_ENV, None)
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main(sys.argv[1:])
