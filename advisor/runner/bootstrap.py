"""advisor's child entry point: ``python bootstrap.py <spec.json>``.

Runs the user's script the way ``python script.py`` would (same ``sys.argv``, ``sys.path[0]``,
cwd, ``__main__`` globals, exit code and traceback), under an advisor session. When advisor has
what it needs it stops the script, saves, and exits 0 with ``os._exit``.
"""

import sys


def _main() -> None:
    import atexit

    session, flush_std, wait_line, advisor_dir = _import_runner()
    _let_sigint_stop_the_script()
    spec = _read_spec(_spec_path(wait_line))
    _output_to_file(spec.get("output_file"), spec["run_dir"])
    _set_environ(spec.get("environ"))
    script = spec["script"]
    argv = [str(a) for a in spec.get("argv") or [script]]
    file_ = _main_file(argv[0], script)
    # Registered before torch and the script register theirs, so it runs last at exit: an
    # uncaught KeyboardInterrupt ends the process by SIGINT, as python's own exit does (python's
    # mechanism is not reliable here: code run during finalization can reset its flag).
    atexit.register(_exit_by_sigint_if_interrupted)
    _STATE["run_dir"] = spec["run_dir"]
    ctl = session.install(spec)
    exc = _run_script(script, file_, _as_main(script, argv, file_))
    _end(ctl, spec, exc, flush_std, advisor_dir)


def _output_to_file(name, run_dir: str) -> None:
    """A process after the baseline (specs.quiet): the script's stdout and stderr go to the file
    ``name`` in its run directory, at the descriptor level so that C code's and subprocesses'
    output goes there too. Here, once the spec is read, because a process started ahead learns its
    run directory only then (a fresh one's parent already pointed both at the file: the same
    file, appended to). A process held on a guess keeps the descriptor when its directory is
    renamed to its trial's."""
    import os

    if not name:
        return
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    try:
        fd = os.open(os.path.join(run_dir, name), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    except OSError:  # the output stays where it was going: never a reason to fail the run
        return
    for target in (1, 2):
        os.dup2(fd, target)
    os.close(fd)


def _set_environ(changes) -> None:
    """The environment variables the recommended command sets before the script (a patch's
    value read from os.environ), set as the shell would have: before the script's first line."""
    import os

    os.environ.update({str(k): str(v) for k, v in (changes or {}).items()})


def _import_runner():
    """advisor's runner, imported from the directory that holds this advisor package; that
    directory and this file's are taken off sys.path again, which the script sees as python
    would have set it. Returns (session, flush_std, wait_line, ADVISOR_DIR)."""
    import os

    here = os.path.dirname(os.path.realpath(__file__))
    # python put this file's directory first on sys.path: take it away again.
    if not sys.flags.safe_path and sys.path and os.path.realpath(sys.path[0] or ".") == here:
        sys.path.pop(0)

    root = os.path.dirname(os.path.dirname(here))  # the directory holding the advisor package
    sys.path.insert(0, root)
    try:
        from advisor.runner import (
            session,  # light: torch is imported by install() below
        )
        from advisor.runner._util import (
            flush_std,
            take_parent_pid,
            wait_line,
        )
        from advisor.runtime.sites import ADVISOR_DIR
        take_parent_pid()
    finally:
        try:
            sys.path.remove(root)
        except ValueError:
            pass
    return session, flush_std, wait_line, ADVISOR_DIR


def _let_sigint_stop_the_script() -> None:
    import signal

    # advisor stops the script with SIGINT (a KeyboardInterrupt: the script's finally blocks run
    # and the results are saved). A shell starts a background job with SIGINT ignored, and python
    # then leaves it ignored: under `advisor analyze ... &` (a CI job run so, too) every stop
    # became a SIGKILL after the grace period, with nothing saved.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _spec_path(wait_line) -> str:
    """The spec's path: the command line's, or in a process started ahead of its trial
    (``--wait <fifo>``) the one that comes through the FIFO."""
    import os

    if sys.argv[1] == "--wait":
        # A process started ahead of its trial (parent.WarmChild): torch is imported while
        # the previous trial runs, then the spec's path comes through the FIFO. The script
        # would have had torch imported before it starts here anyway (session.install).
        import torch  # noqa: F401

        line = wait_line(sys.argv[2])
        if line is None:  # advisor is gone: nobody will send a spec
            import shutil

            shutil.rmtree(os.path.dirname(sys.argv[2]), ignore_errors=True)
            os._exit(0)
        sys.argv[1:] = [line]
    return sys.argv[1]


def _read_spec(path: str) -> dict:
    import json

    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    if spec.get("sandbox_writes"):
        # A sandboxed process starts where the baseline did (the user's cwd): the compiled
        # bytecode of a patched module (the verification) must not land in the user's __pycache__.
        # What the baseline compiled is still read.
        sys.dont_write_bytecode = True
    return spec


def _main_file(argv0: str, script: str) -> str:
    """__file__ as python >= 3.9 sets it: argv[0] joined to the cwd, not normalized (the
    script's own path when argv[0] names another file)."""
    import os

    file_ = argv0 if os.path.isabs(argv0) else os.path.join(os.getcwd(), argv0)
    try:
        if not os.path.samefile(file_, script):
            file_ = script
    except OSError:
        file_ = script
    return file_


def _as_main(script: str, argv: list[str], file_: str) -> dict:
    """A fresh __main__ module for the script, with sys.argv and sys.path[0] as python would
    set them; its globals."""
    import builtins
    import os
    import types
    from importlib.machinery import SourceFileLoader

    main = types.ModuleType("__main__")
    g = main.__dict__
    g["__loader__"] = SourceFileLoader("__main__", file_)
    g["__annotations__"] = {}
    g["__builtins__"] = builtins
    g["__file__"] = file_
    g["__cached__"] = None

    sys.argv = argv
    try:
        sys.orig_argv = [sys.orig_argv[0], *argv]
    except Exception:
        pass
    if not sys.flags.safe_path:
        # python puts realpath(dirname(script)) there (symlinks resolved): see docs/internals.md §1
        sys.path.insert(0, os.path.dirname(os.path.realpath(script)))
    sys.modules["__main__"] = main
    return g


def _run_script(script: str, file_: str, g: dict) -> BaseException | None:
    """Compile and run the script in g; what it raised (held until the results are saved)."""
    import io

    from advisor.runner import session

    exc = None
    code = None
    try:   # the patched copy where the verification reads one in its place (spec sources)
        with io.open_code(session.source_of(script)) as f:
            source = f.read()
        code = compile(source, file_, "exec", dont_inherit=True)
    except SyntaxError as e:  # python prints these with no traceback lines
        e.__traceback__ = None
        exc = e
    except OSError as e:  # as python: "python3: can't open file ...", exit code 2
        print(f"{sys.executable}: can't open file {file_!r}: [Errno {e.errno}] {e.strerror}",
              file=sys.stderr)
        exc = SystemExit(2)
    if code is not None:
        try:
            exec(code, g)
        except BaseException as e:  # held until the results are saved
            exc = e
    return exc


def _end(ctl, spec: dict, exc: BaseException | None, flush_std, advisor_dir: str) -> None:
    """Save the results; then leave at once (exit 0) when advisor stopped the script, else end
    as python would have: return, or raise what the script raised, its traceback printed."""
    import os

    try:
        stopped = ctl.finish(exc)
    except BaseException as e:
        print(f"advisor: internal error while saving results: {type(e).__name__}: {e}",
              file=sys.stderr)
        stopped = ctl.outcome.stop_requested
    if stopped:
        # os._exit skips what a normal exit does for the script's open files: a log appended
        # without a flush would lose its last writes
        from advisor.runner._util import flush_open_files

        flush_open_files(spec.get("run_dir"))
        flush_std()
        os._exit(0)
    if exc is None:
        return
    if isinstance(exc, SystemExit):
        raise exc
    _print_traceback(exc, bool(spec.get("quiet_interrupt")), advisor_dir)
    raise exc


def _print_traceback(exc: BaseException, quiet_interrupt: bool, advisor_dir: str) -> None:
    """The traceback of the script's uncaught exception, advisor's frames left out, printed
    now and not again by the interpreter."""
    _trim_traceback(exc, advisor_dir)
    if isinstance(exc, KeyboardInterrupt) and quiet_interrupt:
        sys.excepthook = _silent_excepthook  # a trial advisor stopped (trials/process.py): no traceback
    try:
        sys.excepthook(type(exc), exc, exc.__traceback__)
    except BaseException:
        sys.__excepthook__(type(exc), exc, exc.__traceback__)
    sys.excepthook = _silent_excepthook  # the interpreter must not print it again
    if isinstance(exc, KeyboardInterrupt):
        _STATE["sigint"] = True


_STATE = {"sigint": False, "run_dir": None}


def _exit_by_sigint_if_interrupted() -> None:
    if not _STATE["sigint"]:
        return
    import os
    import signal

    # the interpreter's finalization would flush the script's open files; the SIGINT below ends
    # the process before it (Ctrl-C, or advisor gone: runner/orphan.py)
    try:
        from advisor.runner._util import flush_open_files

        flush_open_files(_STATE["run_dir"])
    except Exception:
        pass
    for s in (sys.stdout, sys.stderr):
        try:
            s.flush()
        except Exception:
            pass
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    except Exception:
        pass
    os._exit(130)


def _silent_excepthook(*args) -> None:
    return None


def _in_dir(tb, prefix: str) -> bool:
    import os

    fn = tb.tb_frame.f_code.co_filename
    return os.path.realpath(fn).startswith(prefix) if not fn.startswith("<") else False


def _raised_in_advisor(entries: list, prefix: str) -> bool:
    """Did advisor's own code raise, not a call it passes on (the sandbox's ``real_mkdir(...)``
    raising the FileExistsError the script's own mkdir would have: the script's error)?"""
    try:
        from advisor.runner.tracebacks import passes_through
    except Exception:   # noqa: BLE001 - without it, the innermost frame decides
        return _in_dir(entries[-1], prefix)
    for i in range(len(entries) - 1, -1, -1):
        tb = entries[i]
        if not _in_dir(tb, prefix):
            return False
        nxt = entries[i + 1].tb_frame if i + 1 < len(entries) else None
        try:   # the instruction's position (3.11+): which call on the line raised
            pos = next(p for k, p in enumerate(tb.tb_frame.f_code.co_positions()) if k == tb.tb_lasti // 2)
        except Exception:   # noqa: BLE001 - python < 3.11: the line alone
            pos = None
        if not passes_through(tb.tb_frame, tb.tb_lineno, pos, nxt, inner_passes=True):   # the inner ones passed
            return True
    return False


def _trim_traceback(exc: BaseException, advisor_dir: str) -> None:
    """Drop advisor's frames (bootstrap, wrappers) from the tracebacks python will print, unless
    the error was raised inside advisor itself (then it is advisor's bug: show everything)."""
    import os

    prefix = os.path.realpath(advisor_dir) + os.sep
    seen = set()
    e = exc
    stack = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        stack.extend((e.__cause__, e.__context__))
        tb = e.__traceback__
        entries = []
        while tb is not None:
            entries.append(tb)
            tb = tb.tb_next
        # an interrupt lands wherever the interpreter is, advisor's line tracer included:
        # that is not advisor's error, and the user's frames are what they need to see
        if not entries or (_raised_in_advisor(entries, prefix) and not isinstance(e, KeyboardInterrupt)):
            continue
        kept = [t for t in entries if not _in_dir(t, prefix)]
        for a, b in zip(kept, kept[1:]):
            a.tb_next = b
        if kept:
            kept[-1].tb_next = None
        e.__traceback__ = kept[0] if kept else None


if __name__ == "__main__":
    _main()
