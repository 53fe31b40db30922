"""``python tests/no_unshare.py -- COMMAND...``: COMMAND runs where unshare(2) fails with EINVAL,
as it does on gVisor and in containers whose seccomp profile forbids new namespaces.

A seccomp filter (inherited by every process COMMAND starts) answers the unshare system call
with EINVAL and lets every other call through. advisor's copy-on-write sandbox (runner/jail.py)
is then refused by the kernel itself, exactly as on such machines, and every sandboxed process
runs with the Python hooks alone: the tests of that mode run under this, not under an
environment flag that skips the attempt.

x86-64 and aarch64 Linux; standard library only.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS, PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 38, 22, 2
SECCOMP_RET_ALLOW, SECCOMP_RET_ERRNO = 0x7FFF0000, 0x00050000
# BPF opcodes: load word from seccomp_data, jump if equal, return
BPF_LD_W_ABS, BPF_JEQ_K, BPF_RET_K = 0x20, 0x15, 0x06
AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
NR_UNSHARE = {"x86_64": 272, "aarch64": 97}


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def install() -> None:
    """Make unshare(2) fail with EINVAL in this process and everything it starts."""
    machine = platform.machine()
    if machine not in NR_UNSHARE:
        raise OSError(f"no seccomp filter for {machine}")
    prog = b"".join([
        _insn(BPF_LD_W_ABS, 0, 0, 4),                               # seccomp_data.arch
        _insn(BPF_JEQ_K, 1, 0, AUDIT_ARCH[machine]),
        _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),                  # another ABI: leave it be
        _insn(BPF_LD_W_ABS, 0, 0, 0),                               # seccomp_data.nr
        _insn(BPF_JEQ_K, 0, 1, NR_UNSHARE[machine]),
        _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ERRNO | errno.EINVAL),
        _insn(BPF_RET_K, 0, 0, SECCOMP_RET_ALLOW),
    ])
    buf = ctypes.create_string_buffer(prog)

    class SockFprog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    fprog = SockFprog(len(prog) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or \
            libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"seccomp: {os.strerror(e)}")


def main(argv: list[str]) -> None:
    command = argv[argv.index("--") + 1:] if "--" in argv else argv
    install()
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
