"""Streaming parser for Kineto (torch.profiler) traces.

A Kineto trace is one JSON object whose ``traceEvents`` array holds every event. Traces reach
gigabytes, so the array is never loaded whole: the file (plain or gzip, both streamed) is read
in blocks, each block is cut after the last ``}`` ``,`` ``{`` that separates two events, and the
batch of events is parsed with one ``orjson.loads("[" + batch + "]")`` call. A cut that is not a
real event boundary (the pattern inside a string or a nested list) always leaves an unbalanced
batch, so it fails to parse and a cut further left, or a larger batch, is tried. This works for
Kineto's pretty-printed layout (one key per line), one-event-per-line and fully compact JSON.

Only the fields the model needs are kept, in compact ``array`` columns; names are interned.
The other top-level keys (deviceProperties, versions, ...) are parsed from the text around the
array: ``head + "[]" + tail``.
"""

from __future__ import annotations

import gc
import gzip
import json
import os
import re
import zlib
from array import array
from collections.abc import Iterator
from typing import BinaryIO

import orjson

BLOCK = 8 << 20          # bytes per read; its JSON becomes several times its size in transient dicts
MAX_CARRY = 256 << 20    # an unparseable run longer than this is a malformed file, not a big event
HEAD_LIMIT = 64 << 20    # "traceEvents" must start within this many bytes
MAX_TAIL = 256 << 10     # top-level keys after traceEvents (Kineto writes only traceName)
SMALL_FILE = 256 << 20   # below this, a failed stream parse is retried as one full load

_ARRAY_START = re.compile(rb'"traceEvents"\s*:\s*\[')
_MEMCPY = re.compile(r"Memcpy (\w+) \((\w+) -> (\w+)\)")

CPU_CATS = ("cpu_op", "user_annotation", "python_function")
_EMPTY: dict = {}


class TraceError(Exception):
    """A trace that cannot be read; the message is one line naming the file and the problem."""


# --- raw byte stream -------------------------------------------------------------------

def _open(path: str) -> BinaryIO:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rb")
    return open(path, "rb")


def _read(f: BinaryIO, n: int, path: str) -> bytes:
    try:
        return f.read(n)
    except (EOFError, zlib.error, gzip.BadGzipFile) as e:
        raise TraceError(f"{path}: truncated or corrupt gzip stream ({e})") from None


# --- columns -----------------------------------------------------------------------------

class Columns:
    """Append-only typed columns (8 bytes per value, not 32 as in a list of floats)."""

    def __init__(self, spec: dict[str, str]):
        for col, code in spec.items():
            setattr(self, col, array(code))
        self.spec = spec


def new_columns() -> dict[str, Columns]:
    return {
        "cpu": Columns(dict(name_id="q", cat="b", ts="d", dur="d", pid="q", tid="q", ext_id="q")),
        "runtime": Columns(dict(name_id="q", ts="d", dur="d", tid="q", correlation="q")),
        "kernels": Columns(dict(name_id="q", ts="d", dur="d", device="q", stream="q",
                                correlation="q")),
        "memcpy": Columns(dict(name_id="q", ts="d", dur="d", device="q", stream="q",
                               correlation="q", bytes="q")),
        "memset": Columns(dict(ts="d", dur="d", device="q", stream="q", correlation="q",
                               bytes="q")),
        "gpu_annotations": Columns(dict(name_id="q", ts="d", dur="d", device="q", stream="q")),
        "memory": Columns(dict(ts="d", device="q", total_allocated="q", total_reserved="q")),
    }


def _int(v) -> int:
    """Kineto ids are ints, but pid/tid can be strings ("Spans") on non-op rows."""
    try:
        return int(v)
    except (TypeError, ValueError):
        return -1


class Sink:
    """Receives parsed event dicts and appends the interesting fields to columns."""

    def __init__(self):
        self.cols = new_columns()
        self.names: list[str] = []
        self.ids: dict[str, int] = {}
        self.n_events = 0

    def intern(self, name: str) -> int:
        i = self.ids.get(name)
        if i is None:
            if type(name) is not str:  # a malformed event's name (number, list, null): its row is dropped
                raise TypeError(f"event name is a {type(name).__name__}")
            i = self.ids[name] = len(self.names)
            self.names.append(name)
        return i

    def add(self, events: list) -> None:
        """Append the fields we keep from a batch of event dicts.

        The hot loop of the whole tool: appends are pre-bound and values go in unconverted
        (orjson already made numbers). A malformed event (missing key, string where a number
        belongs) raises mid-row; ``_repair`` then drops the partial row so columns stay aligned.
        """
        c = self.cols
        cpu, rt, k, mem = c["cpu"], c["runtime"], c["kernels"], c["memory"]
        intern, ids = self.intern, self.ids
        c_nid, c_cat, c_ts, c_dur, c_pid, c_tid, c_ext = (
            getattr(cpu, n).append for n in ("name_id", "cat", "ts", "dur", "pid", "tid", "ext_id"))
        r_nid, r_ts, r_dur, r_tid, r_corr = (
            getattr(rt, n).append for n in ("name_id", "ts", "dur", "tid", "correlation"))
        k_nid, k_ts, k_dur, k_dev, k_str, k_corr = (
            getattr(k, n).append for n in ("name_id", "ts", "dur", "device", "stream", "correlation"))
        m_ts, m_dev, m_alloc, m_res = (
            getattr(mem, n).append for n in ("ts", "device", "total_allocated", "total_reserved"))
        cpu_cat = {"cpu_op": 0, "user_annotation": 1, "python_function": 2}
        self.n_events += len(events)
        for e in events:
            try:
                cat = e.get("cat")  # an event that is not an object raises here and is skipped
                code = cpu_cat.get(cat)
                if code is not None:
                    if e.get("ph") != "X":
                        continue
                    name = e["name"]
                    nid = ids.get(name)
                    if nid is None:
                        nid = intern(name)
                    pid, tid = e.get("pid"), e.get("tid")
                    ext = (e.get("args") or _EMPTY).get("External id", -1)
                    c_ts(e["ts"]); c_dur(e.get("dur", 0)); c_nid(nid); c_cat(code)
                    c_pid(pid if type(pid) is int else _int(pid))
                    c_tid(tid if type(tid) is int else _int(tid))
                    c_ext(ext)
                elif cat == "kernel":
                    a = e["args"]
                    name = e["name"]
                    nid = ids.get(name)
                    if nid is None:
                        nid = intern(name)
                    k_ts(e["ts"]); k_dur(e.get("dur", 0)); k_nid(nid)
                    k_dev(a.get("device", -1)); k_str(a.get("stream", -1))
                    k_corr(a.get("correlation", -1))
                elif cat == "cuda_runtime" or cat == "cuda_driver":
                    name = e["name"]
                    nid = ids.get(name)
                    if nid is None:
                        nid = intern(name)
                    tid = e.get("tid")
                    r_ts(e["ts"]); r_dur(e.get("dur", 0)); r_nid(nid)
                    r_tid(tid if type(tid) is int else _int(tid))
                    r_corr((e.get("args") or _EMPTY).get("correlation", -1))
                elif cat == "cpu_instant_event":
                    if e.get("name") == "[memory]":
                        a = e["args"]
                        m_ts(e["ts"])
                        m_dev(a.get("Device Id", -1) if a.get("Device Type") == 1 else -1)
                        m_alloc(a.get("Total Allocated", 0)); m_res(a.get("Total Reserved", 0))
                elif cat == "gpu_memcpy" or cat == "gpu_memset" or cat == "gpu_user_annotation":
                    self._gpu_other(cat, e)
            except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
                self._repair()

    def _repair(self) -> None:
        """Drop a partially appended row: truncate every column to its table's shortest."""
        for cols in self.cols.values():
            arrays = [getattr(cols, n) for n in cols.spec]
            n = min(len(a) for a in arrays)
            for a in arrays:
                del a[n:]

    def _gpu_other(self, cat: str, e: dict) -> None:
        a = e.get("args") or _EMPTY
        ts, dur = e["ts"], e.get("dur", 0)
        dev, stream = a.get("device", _int(e.get("pid"))), a.get("stream", _int(e.get("tid")))
        if cat == "gpu_user_annotation":
            self._append("gpu_annotations", name_id=self.intern(e["name"]), ts=ts, dur=dur,
                         device=dev, stream=stream)
            return
        corr, nbytes = a.get("correlation", -1), a.get("bytes", 0)
        if cat == "gpu_memcpy":
            self._append("memcpy", name_id=self.intern(e["name"]), ts=ts, dur=dur, device=dev,
                         stream=stream, correlation=corr, bytes=nbytes)
        else:
            self._append("memset", ts=ts, dur=dur, device=dev, stream=stream, correlation=corr,
                         bytes=nbytes)

    def _append(self, table: str, **row) -> None:
        t = self.cols[table]
        for col, v in row.items():
            getattr(t, col).append(v)


def memcpy_kind(name: str) -> tuple[str, str, str]:
    """'Memcpy HtoD (Pageable -> Device)' -> ('HtoD', 'Pageable', 'Device')."""
    m = _MEMCPY.search(name)
    return (m.group(1), m.group(2), m.group(3)) if m else ("other", "unknown", "unknown")


# --- the streaming splitter ---------------------------------------------------------------

def _boundaries(buf: bytes, end: int) -> Iterator[int]:
    """Positions p (right to left) where buf[p] == '}' ends an event followed by ',' and '{'."""
    p = buf.rfind(b"},", 0, end)
    while p >= 0:
        q = p + 2
        while q < len(buf) and buf[q] in b" \t\r\n":
            q += 1
        if q < len(buf) and buf[q] == 0x7B:  # '{'
            yield p
        p = buf.rfind(b"},", 0, p)


def _loads_array(doc) -> list | None:
    """Parse a complete JSON array (bytes, bytearray or memoryview); None when invalid."""
    try:
        return orjson.loads(doc)
    except orjson.JSONDecodeError:
        pass
    try:  # the stdlib accepts NaN/Infinity, which some Kineto versions write in args
        return json.loads(bytes(doc))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError; nesting past the stack
        return None


def _find_head(f: BinaryIO, path: str) -> tuple[bytes, bytes]:
    """Read until the '[' that opens traceEvents; return (text up to and incl. '[', rest)."""
    buf = b""
    while True:
        block = _read(f, BLOCK, path)
        buf += block
        m = _ARRAY_START.search(buf)
        if m:
            return buf[: m.end()], buf[m.end():]
        if not block and not buf.strip():
            raise TraceError(f"{path}: empty file")
        if not block or len(buf) > HEAD_LIMIT:
            raise _NotStreamable("no traceEvents array")


class _NotStreamable(Exception):
    pass


def stream_events(path: str, sink: Sink) -> dict:
    """Feed every event of ``path`` to ``sink``; return the top-level keys other than traceEvents."""
    with _open(path) as f:
        head, rest = _find_head(f, path)
        # buf always starts with "[": closing a batch is one byte written over the "," of the
        # cut, and dropping the batch deletes from the front (cheap for bytearray). No copies.
        buf = bytearray(b"[") + rest
        start_hint = len(buf)
        while True:
            block = _read(f, BLOCK, path)
            if not block:
                break
            buf += block
            # Look for a cut only in the newly read part plus a margin: a cut in the old part
            # already failed, and its prefix has not changed.
            lo = max(1, start_hint - 16)
            consumed = 0
            for i, p in enumerate(_boundaries(buf, len(buf))):
                if p < lo or i >= 8:
                    break
                buf[p + 1] = 0x5D  # ']'
                with memoryview(buf) as mv:
                    events = _loads_array(mv[:p + 2])
                if events is not None:
                    sink.add(events)
                    consumed = p + 2
                    break
                buf[p + 1] = 0x2C  # ','
            if consumed:
                del buf[1:consumed]
                start_hint = 1
            else:
                start_hint = len(buf) - len(block)
            if len(buf) > MAX_CARRY:
                raise _NotStreamable("no parseable event boundary in %d MB" % (MAX_CARRY >> 20))
        return _finish(path, head, bytes(buf[1:]), sink)


def _finish(path: str, head: bytes, buf: bytes, sink: Sink) -> dict:
    """buf holds the last events, the closing ']' and the tail of the document. The ']' that
    closes traceEvents is the rightmost one for which both the tail (as the rest of the
    top-level object) and the events before it parse; a ']' inside a later key's value makes
    the events part fail, so the search moves left."""
    p = len(buf)
    while True:
        p = buf.rfind(b"]", 0, p)
        if p < 0 or len(buf) - p > MAX_TAIL:
            raise TraceError(f"{path}: truncated JSON (the traceEvents array never closes)")
        meta = _loads_array(b"[" + head + b"]" + buf[p + 1:] + b"]")
        if not meta:
            continue
        body = buf[:p].strip()
        events = _loads_array(b"[" + body + b"]") if body else []
        if events is None:
            continue
        sink.add(events)
        meta = meta[0]
        break
    if not isinstance(meta, dict):
        raise TraceError(f"{path}: not a Kineto trace (top level is not an object)")
    meta.pop("traceEvents", None)
    return meta


def load_whole(path: str, sink: Sink) -> dict:
    """Fallback for small files whose layout defeats the splitter: one full parse."""
    with _open(path) as f:
        data = _read(f, -1, path)
    if not data.strip():
        raise TraceError(f"{path}: empty file")
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            doc = json.loads(data)
        except json.JSONDecodeError as e:
            cut = e.msg.startswith("Unterminated") or e.pos >= len(data.rstrip()) - 1
            kind = "truncated JSON" if cut else "not valid JSON"
            raise TraceError(f"{path}: {kind} ({e.msg} at byte {e.pos})") from None
        except UnicodeDecodeError as e:
            raise TraceError(f"{path}: not a JSON text file (not {e.encoding.upper()} at byte {e.start})") from None
        except RecursionError:
            raise TraceError(f"{path}: not a Kineto trace (JSON nested too deeply)") from None
        except ValueError as e:
            raise TraceError(f"{path}: not valid JSON ({e})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise TraceError(f"{path}: not a Kineto trace (no traceEvents array)")
    events = doc.pop("traceEvents")
    sink.add(events)
    return doc


def parse_file(path: str) -> tuple[Sink, dict]:
    """Parse one trace file into a Sink (columns + names) and its metadata dict."""
    if not os.path.exists(path):
        raise TraceError(f"{path}: no such file or directory")
    if os.path.getsize(path) == 0:
        raise TraceError(f"{path}: empty file")
    sink = Sink()
    # The parse creates millions of short-lived dicts that can never form cycles; the cyclic
    # GC would rescan them on every allocation threshold, at several times the parse's own cost
    # (benchmarks/RESULTS.md, trace ingest).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _parse(path, sink)
    finally:
        if was_enabled:
            gc.enable()


def _parse(path: str, sink: Sink) -> tuple[Sink, dict]:
    try:
        meta = stream_events(path, sink)
    except _NotStreamable as e:
        if os.path.getsize(path) > SMALL_FILE:
            what = "not a Kineto trace" if "traceEvents" in str(e) else "malformed JSON"
            raise TraceError(f"{path}: {what} ({e})") from None
        sink = Sink()
        meta = load_whole(path, sink)
    except OSError as e:
        raise TraceError(f"{path}: cannot read ({e.strerror or e})") from None
    return sink, meta
