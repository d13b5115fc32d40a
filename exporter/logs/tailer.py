"""Follows one vLLM log file through rotations and restarts, giving the stage machine each line exactly once: fed,
or only counted when the analyzer is quiescent and the line holds none of the words it reacts to (read blocks are
scanned for those in one pass: exporter/logs/scan.py).

What the peers get wrong, done right: a file is known by a checksum of its first bytes (inodes are
reused), the offset is persisted atomically together with the stage machine's counters, so a restart
resumes where it stopped (mtail starts at the end and loses what was written meanwhile); a file truncated
while we were away is read from its start again rather than from a stale offset (promtail); a file
renamed away is drained to its end before the new one is opened; what cannot be read is counted.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
from bisect import bisect_left
from dataclasses import dataclass
from typing import Any, BinaryIO

from exporter.config import LogSource
from exporter.logs.formats import (
    CRI_RECORD,  # LineDecoder's own pattern for a CRI record
    DEFAULT_MAX_LINE_BYTES,
    LineDecoder,
    LogLine,
    clean_text,
    detect_format,
)
from exporter.logs.scan import (
    BARE_TRACEBACK,
    BlockScanner,
    head_ascii,
    quiet_message_ascii,
    scanner,
)
from exporter.logs.stages import UNDECIDED_STAGE, LogAnalyzer

log = logging.getLogger("vllm_headroom.logs")
FINGERPRINT_BYTES = 1024
READ_CHUNK = 1 << 20
STATE_VERSION = 1
SAVE_EVERY_S = 10.0  # offsets and counters are saved together, so an older save re-reads, never recounts
# When only the offsets moved since the last save (a healthy server's stats and access lines change no counter),
# the save waits this many save intervals: a crash then re-reads up to a minute of log (the same lines give the
# same state) instead of the state file being rewritten and fsynced every 10 s for nothing.
OFFSETS_ONLY_SAVE_FACTOR = 6
MAX_KNOWN_FILES = 16  # files left behind (symlink flips, several pods under one glob) whose offsets are kept
WARN_EVERY_S = 60.0  # a repeating problem (an unreadable file, poison lines) is logged at most this often


def _inode(path: str) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def _fingerprint(data: bytes) -> str:
    return hashlib.sha1(data).hexdigest()


def _identity(st: os.stat_result) -> str:
    """Device and inode: with the fingerprint of the first bytes, what tells one file from another."""
    return f"{st.st_dev}:{st.st_ino}"


def _position(entry: Any) -> dict[str, Any]:
    """A saved position, checked field by field: valid JSON with `offset: null` must not pass (it recounted)."""
    if not isinstance(entry, dict):
        raise ValueError("a file position is not a mapping")
    out: dict[str, Any] = {}
    for key in ("offset", "line", "fp_len"):
        value = entry.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{key} is {value!r}, expected a whole number >= 0")
        out[key] = value
    if not isinstance(entry.get("fingerprint"), str):
        raise ValueError("fingerprint is not a string")
    out["fingerprint"] = entry["fingerprint"]
    fmt = entry.get("format")
    if fmt is not None and fmt not in ("plain", "cri", "docker"):
        raise ValueError(f"format is {fmt!r}")
    out["format"] = fmt
    return out


@dataclass
class TailHealth:
    bytes_read: int = 0
    lines_read: int = 0
    rotations: int = 0
    truncations: int = 0
    bytes_skipped: int = 0
    lines_cut: int = 0
    read_errors: int = 0
    file_present: bool = False
    last_read: float | None = None  # wall clock of the last poll that found new bytes


@dataclass(frozen=True)
class TailSnapshot:
    """What the collector reads of one tailer, copied under its lock: the analyzer's word and the tail's health."""

    engine_stage: str
    counts: dict[str, int]
    oom_counts: dict[tuple[str, str], int]
    startup: dict[str, float]
    facts: dict[str, Any]
    health: TailHealth


class LogTailer:
    def __init__(
        self,
        server: str,
        source: LogSource,
        state_dir: str | None,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        save_every_s: float = SAVE_EVERY_S,
        undecided_stage: str = UNDECIDED_STAGE,
    ):
        self.server = server
        self.pattern = source.path  # a path, or a glob (Kubernetes pod logs): the newest match is followed
        self.is_glob = any(ch in source.path for ch in "*?[")
        self.path = source.path
        self.format_setting = source.format
        self.state_path = os.path.join(state_dir, f"{server}.tail.json") if state_dir else None
        self.max_line_bytes = max_line_bytes
        self.save_every_s = save_every_s
        self.lock = threading.Lock()  # held while lines are fed; the collector takes it to read
        self.version = 0  # bumped by every poll: /metrics is rebuilt only when some source's version moved
        self.analyzer = LogAnalyzer(undecided_stage=undecided_stage)
        self._scanner: BlockScanner | None = None  # the process's automaton (scan.scanner), taken on first use
        self.health = TailHealth()
        self._fh: BinaryIO | None = None
        self._inode: int | None = None
        self._offset = 0  # bytes of the current file consumed into complete lines
        self._line_no = 0
        self._fp = ""
        self._fp_len = 0
        self._buf = b""
        self._decoder: LineDecoder | None = None
        self._safe = (0, 0)  # (offset, line number) with no partial line pending: what is persisted
        self._saved: dict | None = None
        self._last_save = 0.0
        self._last_check = 0.0  # when save_if_due last compared the state with the saved one
        self._saved_sig: str | None = None  # the last saved state, offsets left out: see _signature
        self._dirty = False
        self._last_size = 0
        self._last_mtime = 0  # with the size: a file rewritten to exactly its old size still gets a poll
        self._stat: os.stat_result | None = None  # needs_poll's stat, for the poll that follows it
        self._tail = b""  # the bytes just before our read position, to notice a rewrite of the same size
        self._skipping = False  # inside an over-long line whose rest is being dropped
        self._skipped = 0
        self._ident: str | None = None  # device:inode of the open file
        self._fresh = True  # no file opened yet: the saved state applies to the first one
        self._known: dict[str, dict[str, Any]] = {}  # device:inode -> position in a file we left
        self._save_lock = threading.Lock()  # one writer of the state file at a time
        self._warned: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}
        self._load_state()

    # -- persistence ------------------------------------------------------------------------

    def _load_state(self) -> None:
        if not self.state_path or not os.path.exists(self.state_path):
            return
        try:
            with open(self.state_path, encoding="utf-8") as f:
                data = json.load(f)
            if not isinstance(data, dict) or data.get("version") != STATE_VERSION or data.get("path") != self.pattern:
                log.info(
                    "%s: state file %s is for another log or version; starting afresh", self.server, self.state_path
                )
                return
            saved = _position(data)
            saved["file"] = data.get("file") if isinstance(data.get("file"), str) else None
            inode = data.get("inode")
            saved["inode"] = inode if isinstance(inode, int) and not isinstance(inode, bool) else None
            saved["ident"] = data.get("ident") if isinstance(data.get("ident"), str) else None
            known = {}
            for ident, entry in (data.get("known") or {}).items():
                known[str(ident)] = _position(entry)
            analyzer = LogAnalyzer.restore(data["analyzer"], undecided_stage=self.analyzer.undecided_stage)
        except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            log.warning(
                "%s: cannot use state file %s (%s); reading the log from its start", self.server, self.state_path, exc
            )
            return
        self.analyzer, self._saved, self._known = analyzer, saved, known

    def _state(self) -> dict[str, Any]:
        """What a save writes; the caller holds the lock."""
        return {
            "version": STATE_VERSION,
            "path": self.pattern,
            "file": self.path,
            "fingerprint": self._fp,
            "fp_len": self._fp_len,
            "offset": self._safe[0],
            "line": self._safe[1],
            "inode": self._inode,
            "ident": self._ident,
            "format": self._decoder.format if self._decoder else None,
            "known": dict(self._known),
            "analyzer": self.analyzer.snapshot(),
            "saved_at": time.time(),
        }

    @staticmethod
    def _signature(data: dict[str, Any]) -> str:
        """The state as written, without what only says how far the log was read (offsets, line counts, the
        time): when this is unchanged, an older save re-reads lines that change nothing. Text, not the dicts:
        the analyzer's snapshot shares some with its live state (an epoch's facts), which change in place."""
        return json.dumps(
            {**data, "offset": None, "line": None, "saved_at": None, "analyzer": {**data["analyzer"], "lines": None}}
        )

    def save_state(self, force: bool = False) -> None:
        """Write offsets and counters together: a unique temp file, fsync, rename, so a reader (or a kill)
        sees the old state or the new one, never half of one; one writer at a time."""
        if not self.state_path or not (self._dirty or force):
            return
        with self._save_lock:
            with self.lock:
                data = self._state()
                self._dirty = False
            directory = os.path.dirname(self.state_path) or "."
            tmp = None
            try:
                os.makedirs(directory, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=os.path.basename(self.state_path) + ".", suffix=".tmp", dir=directory)
                with open(fd, "wb") as f:
                    f.write(json.dumps(data).encode("utf-8"))  # one C pass; json.dump writes piece by piece
                    f.flush()
                    os.fsync(f.fileno())
                os.replace(tmp, self.state_path)
                tmp = None
                self._last_save = self._last_check = time.monotonic()
                self._saved_sig = self._signature(data)
            except OSError as exc:
                self._dirty = True  # try again at the next save
                self._warn("save", "%s: cannot write state file %s: %s", self.server, self.state_path, exc)
            finally:
                if tmp is not None:
                    try:
                        os.unlink(tmp)
                    except OSError:
                        pass

    def _remember_current(self) -> None:
        """Keep the position in the open file, so coming back to it (a symlink flipped back, the other pod's log
        under one glob) resumes there instead of reading it again from byte 0."""
        if self._ident is None or self._fh is None:
            return
        self._known.pop(self._ident, None)
        self._known[self._ident] = {
            "fingerprint": self._fp,
            "fp_len": self._fp_len,
            "offset": self._safe[0],
            "line": self._safe[1],
            "format": self._decoder.format if self._decoder else None,
        }
        while len(self._known) > MAX_KNOWN_FILES:
            del self._known[next(iter(self._known))]

    def _warn_due(self, what: str) -> bool:
        """At most one log line per WARN_EVERY_S for a repeating problem (an unreadable file, poison lines)."""
        now = time.monotonic()
        last = self._warned.get(what)
        if last is not None and now - last < WARN_EVERY_S:
            self._suppressed[what] = self._suppressed.get(what, 0) + 1
            return False
        self._warned[what] = now
        return True

    def _warn(self, what: str, msg: str, *args: Any) -> None:
        if self._warn_due(what):
            n = self._suppressed.pop(what, 0)
            log.warning(msg + (f" ({n} more like it not logged)" if n else ""), *args)

    # -- following the file -------------------------------------------------------------------

    def snapshot(self) -> TailSnapshot:
        """A consistent copy for readers on other threads (the collector): they never take the lock themselves."""
        with self.lock:
            ep = self.analyzer.epoch
            return TailSnapshot(
                ep.engine_stage,
                dict(self.analyzer.counts),
                dict(self.analyzer.oom_counts),
                dict(ep.startup),
                dict(ep.facts),
                dataclasses.replace(self.health),
            )

    def heeds_serving(self) -> bool:
        """Whether note_serving could change anything: read without the lock, as a hint for the scrape loop (most
        runs show their start, so most scrapes need no hop to the log thread); a stale answer costs one needless
        hop, or defers the note to the next scrape."""
        ep = self.analyzer.epoch
        return not (ep.started or ep.ready or ep.crashed)

    def note_serving(self) -> None:
        """A scrape found the server serving: tell the analyzer, but only when nothing the server logged is left
        unread (lines still to read may hold a restart, which the scrape's answer does not belong to)."""
        if self._fh is None or self._skipping:
            return
        try:
            size = os.stat(self.path).st_size
        except OSError:
            return
        with self.lock:
            if self._offset + len(self._buf) >= size and self._last_size == size:
                self.analyzer.note_serving()

    def needs_poll(self) -> bool:
        """A stat instead of a read: most polls of a quiet log find nothing new. The poll that follows uses the
        same stat for its rotation check and reads up to the size it saw (one stat a poll, not three calls)."""
        self._stat = None
        if self._fh is None or self.is_glob:
            return True
        try:
            st = os.stat(self.path)
        except OSError:
            return True
        self._stat = st
        return (
            st.st_ino != self._inode
            or st.st_size != self._last_size
            or st.st_mtime_ns != self._last_mtime
            or self.analyzer.pending is not None
        )

    def poll(self, checked: bool = False) -> int:
        """Read what is new; returns the number of lines fed. Never raises: a line the decoder or the analyzer
        cannot take is counted (read_errors) and passed over, and file trouble is counted and retried.

        `checked`: needs_poll has just said yes; its stat stands for this poll's (the daemon's loop)."""
        fed = 0
        st, self._stat = self._stat if checked else None, None
        try:
            if self._fh is None and not self._open(first=self._fresh):
                return 0
            fed += self._check_rotation(st)
            fed += self._drain(upto=st if st is not None and st.st_ino == self._inode else None)
            if not fed and self.analyzer.pending is not None:
                with self.lock:  # the collector reads the analyzer under the same lock
                    self.analyzer.flush()  # the log went quiet with a failure still undecided: count it now
                self._dirty = True
        except OSError as exc:
            self.health.read_errors += 1
            self._warn("read", "%s: reading %s failed: %s", self.server, self.path, exc)
            self._remember_current()  # reopened later at the last complete line, not at byte 0
            self._close()
        except Exception:  # a bug of ours: counted, logged, and the next poll goes on from the safe offset
            self.health.read_errors += 1
            if self._warn_due("bug"):
                log.exception("%s: unexpected error while reading %s", self.server, self.path)
            self._remember_current()
            self._close()
        self.version += 1
        self.save_if_due()
        return fed

    def save_if_due(self) -> None:
        """Every `save_every_s` while something changed: saved when more than the offsets moved (a counter, the
        stage, the file followed), else only every OFFSETS_ONLY_SAVE_FACTOR intervals. A counter is thus saved
        within one interval of moving, as before; a healthy log's state file is rewritten once a minute."""
        if not self._dirty:
            return
        now = time.monotonic()
        if now - self._last_check < self.save_every_s:
            return
        self._last_check = now
        if now - self._last_save < OFFSETS_ONLY_SAVE_FACTOR * self.save_every_s and self._saved_sig is not None:
            with self.lock:
                sig = self._signature(self._state())
            if sig == self._saved_sig:
                return
        self.save_state()

    def close(self) -> None:
        self.save_state(force=True)
        self._close()

    def _close(self) -> None:
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
        self._fh = None

    def _resolve(self) -> str | None:
        """The newest file matching the glob (a new pod's log replaces the old pod's)."""
        best, best_mtime = None, -1.0
        for candidate in glob.glob(self.pattern):
            try:
                mtime = os.stat(candidate).st_mtime
            except OSError:
                continue
            if mtime > best_mtime:
                best, best_mtime = candidate, mtime
        return best

    def _open(self, first: bool = False) -> bool:
        if self.is_glob:
            found = self._resolve()
            if found is None:
                self.health.file_present = False
                return False
            if first and self._saved is not None and self._saved.get("file") not in (None, found):
                self._saved["fp_len"] = 0  # another file than the one we left: start it from the top
                self._saved["fingerprint"] = ""
            self.path = found
        try:
            fh = open(self.path, "rb")
        except FileNotFoundError:
            if self.health.file_present:
                log.info("%s: %s is gone; waiting for it to come back", self.server, self.path)
            self.health.file_present = False
            return False
        except OSError as exc:
            self.health.read_errors += 1
            self._warn("open", "%s: cannot open %s: %s", self.server, self.path, exc)
            return False
        self._warned.pop("open", None)
        try:
            st = os.fstat(fh.fileno())
            head = fh.read(FINGERPRINT_BYTES)
        except OSError:
            fh.close()
            raise
        self._fh, self._inode, self._ident = fh, st.st_ino, _identity(st)
        self._fp, self._fp_len = _fingerprint(head), len(head)
        self._fresh = False
        self.health.file_present = True
        self._reset_partial()
        self._tail = b""
        saved, self._saved = self._saved, None
        start, line = 0, 0
        fmt = None
        if first and saved is not None:
            n = saved["fp_len"]
            same = n <= len(head) and _fingerprint(head[:n]) == saved["fingerprint"]
            # Same first bytes but another file (device and inode differ): a rotation whose new file starts like
            # the old one, or a symlink now pointing elsewhere; checksums alone cannot tell them apart.
            other = saved["ident"] not in (None, self._ident) or saved["inode"] not in (None, st.st_ino)
            if same and not other and saved["offset"] <= st.st_size:
                start, line, fmt = saved["offset"], saved["line"], saved["format"]
                log.info("%s: resuming %s at byte %d (line %d)", self.server, self.path, start, line)
            else:
                drained = self._drain_rotated_sibling(saved)
                if not drained and saved["ident"] not in (None, self._ident):  # left, not gone: we may come back
                    self._known.setdefault(
                        saved["ident"], {k: saved[k] for k in ("fingerprint", "fp_len", "offset", "line", "format")}
                    )
                log.info(
                    "%s: %s is not the file we left (rotated or replaced while stopped); reading it from the start",
                    self.server,
                    self.path,
                )
        if start == 0:
            known = self._known.pop(self._ident, None)
            if known is not None:
                n = known["fp_len"]
                if n <= len(head) and _fingerprint(head[:n]) == known["fingerprint"] and known["offset"] <= st.st_size:
                    start, line, fmt = known["offset"], known["line"], known["format"]
                    log.info("%s: back to %s, read before: resuming at byte %d", self.server, self.path, start)
        self._offset, self._line_no = start, line
        self._safe = (start, line)
        fh.seek(start)
        self._decoder = LineDecoder(fmt, self.max_line_bytes) if fmt else None
        if self._decoder is None and self.format_setting != "auto":
            self._decoder = LineDecoder(self.format_setting, self.max_line_bytes)
        return True

    def _reset_partial(self) -> None:
        """Forget a line read only in part (its rest will be read again, or never comes)."""
        self._buf, self._skipping, self._skipped = b"", False, 0

    def _drain_rotated_sibling(self, saved: dict) -> bool:
        """Finish the file we were reading from `path.1`: renamed there while we were stopped, or copied there by
        copytruncate before the truncation we just saw."""
        sibling = self.path + ".1"
        try:
            with open(sibling, "rb") as fh:
                n = int(saved.get("fp_len", 0))
                head = fh.read(n)
                if _fingerprint(head) != saved.get("fingerprint"):
                    return False
                # An empty fingerprint (the file was empty when opened) proves nothing: then the inode must match.
                if not n and saved.get("ident") != _identity(os.fstat(fh.fileno())):
                    return False
                fh.seek(int(saved["offset"]))
                self._line_no = int(saved["line"])
                self._reset_partial()  # re-read from the sibling instead
                self._decoder = LineDecoder(saved.get("format") or "plain", self.max_line_bytes)
                log.info("%s: finishing the rotated %s from byte %s", self.server, sibling, saved["offset"])
                self._consume_stream(fh, final=True)
                return True
        except OSError:
            return False

    def _check_rotation(self, st: os.stat_result | None = None) -> int:
        """`st`: the path's stat, when needs_poll has just taken it."""
        if self.is_glob:
            newest = self._resolve()
            if newest is not None and newest != self.path:  # a new pod, or a new file: finish the old one first
                fed = self._drain(final=True)
                self.health.rotations += 1
                log.info("%s: following %s (newest match of %s)", self.server, newest, self.pattern)
                self._remember_current()
                self._close()
                self._open()
                return fed
        if st is None:
            try:
                st = os.stat(self.path)
            except FileNotFoundError:
                return 0  # renamed or deleted: keep reading the open file until a new one appears
        fed = 0
        if st.st_ino != self._inode:
            fed += self._drain(final=True)  # the rest of the old file first
            self.health.rotations += 1
            log.info("%s: %s was rotated; following the new file", self.server, self.path)
            self._remember_current()
            self._close()
            self._open()
            return fed
        if st.st_size < self._offset or self._replaced_in_place():
            # copytruncate copied the file to path.1 first: what we had not read yet is there
            self._drain_rotated_sibling(
                {
                    "fp_len": self._fp_len,
                    "fingerprint": self._fp,
                    "offset": self._offset,
                    "line": self._line_no,
                    "format": self._decoder.format if self._decoder else None,
                }
            )
            self.health.truncations += 1
            self.health.bytes_skipped += max(0, self._last_size - self._offset)  # written, never read
            log.info("%s: %s was truncated (copytruncate?); reading it again from the start", self.server, self.path)
            self._close()
            self._open()
        return fed

    def _replaced_in_place(self) -> bool:
        """Same inode, but the first bytes changed: truncated and rewritten past our offset between polls."""
        assert self._fh is not None
        pos = self._fh.tell()
        head = os.pread(self._fh.fileno(), FINGERPRINT_BYTES, 0)  # seeking would drop the read buffer
        if len(head) < self._fp_len:
            return True
        if _fingerprint(head[: self._fp_len]) != self._fp:
            return True
        if len(head) > self._fp_len:  # the file grew past the fingerprint: widen it
            self._fp, self._fp_len = _fingerprint(head), len(head)
        if self._tail and pos >= len(self._tail):
            # copytruncate, then regrown to exactly where we were: the first bytes may match (the same startup
            # banner), the bytes before our position will not
            if os.pread(self._fh.fileno(), len(self._tail), pos - len(self._tail)) != self._tail:
                return True
        return False

    def _drain(self, final: bool = False, upto: os.stat_result | None = None) -> int:
        """Read the open file to its end, or, given `upto` (this poll's stat of it), to the size that stat saw:
        what was written since is read by the next poll, which that stat's size and mtime ask for."""
        if self._fh is None:
            return 0
        fed = self._consume_stream(self._fh, final, None if upto is None else upto.st_size)
        pos = self._fh.tell()
        self._tail = os.pread(self._fh.fileno(), min(pos, 64), pos - min(pos, 64)) if pos else b""
        if upto is not None:
            self._last_size, self._last_mtime = upto.st_size, upto.st_mtime_ns
        else:
            try:
                self._last_mtime = os.fstat(self._fh.fileno()).st_mtime_ns
            except OSError:
                pass
        if self._fp_len < FINGERPRINT_BYTES and self._offset > self._fp_len:
            # opened (nearly) empty and grown since: widen the fingerprint before it is saved with this offset,
            # so a restart can still recognise the file by its first bytes
            head = os.pread(self._fh.fileno(), FINGERPRINT_BYTES, 0)
            if len(head) > self._fp_len and _fingerprint(head[: self._fp_len]) == self._fp:
                with self.lock:
                    self._fp, self._fp_len = _fingerprint(head), len(head)
        return fed

    def _consume_stream(self, fh: BinaryIO, final: bool = False, size: int | None = None) -> int:
        """Read and feed to the end of `fh`, or up to byte `size` (then the caller keeps the file's size)."""
        fed = 0
        pos = fh.tell() if size is not None else 0
        while True:
            want = READ_CHUNK if size is None else min(READ_CHUNK, size - pos)
            if want <= 0:  # a read of READ_CHUNK at the end costs a 1 MiB buffer and an empty read
                break
            chunk = fh.read(want)
            if not chunk:
                break
            pos += len(chunk)
            self.health.bytes_read += len(chunk)
            self.health.last_read = time.time()
            fed += self._feed_chunk(chunk)
        if final and (self._buf or self._skipping):  # a last line with no newline, in a file that will not grow
            fed += self._feed_lines([(self._buf, len(self._buf) + self._skipped, self._skipping)])
            self._reset_partial()
        if size is None:
            try:
                self._last_size = os.fstat(fh.fileno()).st_size
            except OSError:
                pass
        return fed

    def _feed_chunk(self, chunk: bytes) -> int:
        fed = 0
        if self._skipping:  # inside a runaway line: drop bytes up to its newline
            nl = chunk.find(b"\n")
            if nl == -1:
                self._skipped += len(chunk)
                self.health.bytes_skipped += len(chunk)
                return 0
            self.health.bytes_skipped += nl
            fed += self._feed_lines([(self._buf, len(self._buf) + self._skipped + nl + 1, True)])
            self._reset_partial()
            chunk = chunk[nl + 1 :]
        data = self._buf + chunk if self._buf else chunk
        last_nl = data.rfind(b"\n")
        if self._decoder is None and last_nl != -1:  # told by the first lines, as _feed_lines would
            head = data[:last_nl].split(b"\n", 5)[:5]
            self._decoder = LineDecoder(
                detect_format(b"\n".join(r[: self.max_line_bytes] for r in head)), self.max_line_bytes
            )
        if last_nl == -1:
            self._buf = data
        elif self._decoder is not None and self._decoder.format in ("plain", "cri") and self._block_scanner().available:
            # every block, however small: since the scanner reads stats and frame lines without the full dispatch
            # (LogAnalyzer.quick), a poll finding 1, 2, 5 or 10 lines of a serving log costs 52 / 59 / 74 / 99 µs
            # scanned against 58 / 73 / 104 / 167 µs fed (CPU per poll, best of two runs of 3,000 polls)
            self._buf = data[last_nl + 1 :]
            fed += self._scan_block(data[: last_nl + 1])
        elif self._decoder is not None and self._decoder.format == "plain":
            self._buf = data[last_nl + 1 :]
            fed += self._feed_plain(data[: last_nl + 1])
        else:
            self._buf = data[last_nl + 1 :]
            lines = []
            for raw in data[:last_nl].split(b"\n"):
                cut = len(raw) > self.max_line_bytes
                lines.append((raw[: self.max_line_bytes] if cut else raw, len(raw) + 1, cut))
                if cut:
                    self.health.bytes_skipped += len(raw) - self.max_line_bytes
            fed += self._feed_lines(lines)
        if len(self._buf) > self.max_line_bytes:  # a runaway line still without newline: keep its head only
            self.health.bytes_skipped += len(self._buf) - self.max_line_bytes
            self._skipped = len(self._buf) - self.max_line_bytes
            self._buf = self._buf[: self.max_line_bytes]
            self._skipping = True
        return fed

    def _block_scanner(self) -> BlockScanner:
        if self._scanner is None:
            self._scanner = scanner()
        return self._scanner

    def _scan_block(self, block: bytes) -> int:
        """Whole plain or CRI lines: while the analyzer is quiescent (and no CRI record is half joined), jump from
        one line holding a trigger word (exporter/logs/scan.py) to the next, counting the lines between; feed
        those lines, unless the words stand only in vLLM's prefix or in a request log's prompt, and every line
        while the analyzer is not quiescent. Line numbers, offsets and counters come out as if every line had
        been fed."""
        dec = self._decoder
        assert dec is not None
        cri = dec.format == "cri"
        scan = self._block_scanner()
        hits = scan.hits(block)
        starts = [h[1] for h in hits]  # searched by bisection: a busy log has a hit on most lines
        whole = scan.whole_line
        walls = [h[1] for h in hits if h[0] in whole]  # where a line that is always fed stands (rarely any)
        ascii_block = block.isascii()
        analyzer = self.analyzer
        cap = self.max_line_bytes
        end = len(block)
        pos = hi = oi = fed = mark = 0  # lines from `mark` to `pos` are skipped, not yet counted
        nh = len(hits)
        open_hits: list[int] | None = None  # words that count while a traceback is open, found when first needed
        with self.lock:
            quiet = 0 if dec.pending else analyzer.quiescent()
            while pos < end:
                if quiet == 1 and open_hits is None:
                    open_hits = scan.open_frame_hits(block)
                    if open_hits is None:
                        quiet = 0
                if quiet:
                    hi = bisect_left(starts, pos, hi)
                    start = starts[hi] if hi < nh else end
                    open_at = end
                    if quiet == 1:
                        assert open_hits is not None
                        oi = bisect_left(open_hits, pos, oi)
                        open_at = open_hits[oi] if oi < len(open_hits) else end
                    nl = block.rfind(b"\n", pos, min(start, open_at))
                    long = False
                    if nl >= 0:  # whole lines before the next trigger
                        stop = nl + 1
                        pos = self._long_line(block, pos, stop) if stop - pos > cap else stop
                        long = pos < stop  # an over-long line: fed below
                        if hi == nh and open_at == end and not long:
                            break
                    if not long and open_at >= start:
                        nl = block.find(b"\n", start)
                        if open_at > nl:
                            last = hits[bisect_left(starts, nl, hi) - 1][2]  # where the line's last hit ends
                            stop, read = self._inert(block, pos, nl, last, walls, ascii_block, cri)
                            if stop:
                                pos = stop
                                if read:  # read by LogAnalyzer.quick: counted with the skipped lines
                                    quiet = analyzer.quiescent()
                                continue
                fed += self._count_skipped(block, mark, pos)
                nl = block.find(b"\n", pos)
                if cri:
                    fed += self._feed_lines_locked([self._physical(block[pos:nl])])
                else:
                    fed += self._feed_one_plain(block[pos:nl])
                pos = mark = nl + 1
                quiet = 0 if dec.pending else analyzer.quiescent()
            fed += self._count_skipped(block, mark, pos)
            self._dirty = self._dirty or fed > 0
        return fed

    def _count_skipped(self, block: bytes, start: int, stop: int) -> int:
        """Count the whole lines in block[start:stop] as read: line numbers, offsets, the analyzer's line count."""
        if stop <= start:
            return 0
        n = block.count(b"\n", start, stop)
        self._line_no += n
        self._offset += stop - start
        self._safe = (self._offset, self._line_no)
        self.health.lines_read += n
        self.analyzer.skip(n)
        return n

    def _inert(
        self, block: bytes, pos: int, nl: int, last: int, walls: list[int], ascii_block: bool, cri: bool
    ) -> tuple[int, bool]:
        """What the line block[pos:nl], whose trigger words end by `last`, needs from a quiescent analyzer, as (where
        to go on from, or 0 to feed it; whether the analyzer read it): nothing (its words stand only in vLLM's
        prefix, `(EngineCore_DP0 pid=7)`, or it is a message the analyzer returns on unread: a request log, whose
        prompt says anything); nothing more than LogAnalyzer.quick did with it (a frame line, a bare traceback
        header, a stats line), the header with the frames below it (`_frames_below`). A line holding a word of
        `walls` is fed."""
        if nl - pos > self.max_line_bytes or not (ascii_block or block[pos:nl].isascii()):
            return 0, False  # cut, or offsets in bytes and characters differ: fed, not reasoned about
        if walls:
            w = bisect_left(walls, pos)
            if w < len(walls) and walls[w] < nl:
                return 0, False
        at = pos
        if cri:
            # the record's message as LineDecoder reads it: a `F` record's text after the runtime's prefix (a `P`
            # one holds a whole-line word and never gets here), a line that is no record as it stands
            m = CRI_RECORD.match(block[pos:nl])
            if m is not None:
                if m.group("tag") != b"F" or m.start("msg") < 0:
                    return 0, False
                at += m.start("msg")
        begin, process, shaped = head_ascii(block, at, nl)
        if begin >= last or quiet_message_ascii(block, begin, nl):
            return nl + 1, False
        if shaped and self.analyzer.quick(process, block[begin:nl].decode("ascii")):
            if not cri and nl - begin == len(BARE_TRACEBACK) and block.startswith(BARE_TRACEBACK, begin):
                return self._frames_below(block, block[pos:begin], nl + 1, walls, ascii_block, process), True
            return nl + 1, True
        return 0, False

    def _frames_below(
        self, block: bytes, prefix: bytes, pos: int, walls: list[int], ascii_block: bool, process: str | None
    ) -> int:
        """Past the lines from `pos` on that carry the bare traceback header's own prefix (vLLM's formatter repeats
        it on every line of a logged traceback) with an indented message, a frame or its code, when
        LogAnalyzer.quick_frames can read them together; returns where the next line starts."""
        indented = prefix + b"  "
        cap = self.max_line_bytes
        end = pos
        while block.startswith(indented, end):
            nl = block.find(b"\n", end)
            if nl - end > cap:
                break
            end = nl + 1
        if end == pos or not (ascii_block or block[pos:end].isascii()):
            return pos
        if walls:
            w = bisect_left(walls, pos)
            if w < len(walls) and walls[w] < end:
                return pos
        body = block[pos + len(prefix) : end - 1].replace(b"\n" + prefix, b"\n")
        return end if self.analyzer.quick_frames(process, body.decode("ascii")) else pos

    def _long_line(self, block: bytes, pos: int, stop: int) -> int:
        """The start of the first line longer than max_line_bytes in block[pos:stop] (whole lines), else stop:
        hops from the last newline within reach to the next, so it costs about one pass of memrchr."""
        cap = self.max_line_bytes
        while stop - pos > cap:
            nl = block.rfind(b"\n", pos, pos + cap + 1)
            if nl < 0:
                return pos
            pos = nl + 1
        return stop

    def _physical(self, raw: bytes) -> tuple[bytes, int, bool]:
        """(line cut at max_line_bytes, bytes consumed with its newline, cut), the cut bytes counted as skipped."""
        if len(raw) > self.max_line_bytes:
            self.health.bytes_skipped += len(raw) - self.max_line_bytes
            return raw[: self.max_line_bytes], len(raw) + 1, True
        return raw, len(raw) + 1, False

    def _feed_plain(self, complete: bytes) -> int:
        """Plain logs, the common case: one decode per chunk, and no partial lines to track."""
        with self.lock:
            return self._feed_plain_locked(complete)

    def _feed_plain_locked(self, complete: bytes) -> int:
        texts = complete.decode("utf-8", errors="replace").split("\n")[:-1]
        fed = 0
        number = self._line_no
        for text in texts:
            number += 1
            fed += self._feed_text_line(number, text)
        self._line_no = number
        self._offset += len(complete)
        self._safe = (self._offset, number)
        self.health.lines_read += fed
        self._dirty = self._dirty or fed > 0
        return fed

    def _feed_one_plain(self, raw: bytes) -> int:
        """One plain line (without its newline): what _feed_plain_locked does, for one."""
        self._line_no += 1
        fed = self._feed_text_line(self._line_no, raw.decode("utf-8", errors="replace"))
        self._offset += len(raw) + 1
        self._safe = (self._offset, self._line_no)
        self.health.lines_read += fed
        return fed

    def _feed_text_line(self, number: int, text: str) -> int:
        """Cut, clean and feed one decoded plain line; 1 when the analyzer took it, 0 for a poison line."""
        cap = self.max_line_bytes
        cut = False
        if len(text) > cap:
            encoded = text.encode("utf-8")
            if len(encoded) > cap:
                self.health.bytes_skipped += len(encoded) - cap
                self.health.lines_cut += 1
                text = encoded[:cap].decode("utf-8", errors="replace")
                cut = True
        if text and text[0] == "\x00":  # the hole a copytruncate leaves before a writer's next line
            text = text.lstrip("\x00")
        try:
            self.analyzer.feed(
                LogLine(number, clean_text(text) if "\x1b" in text or text.endswith("\r") else text, None, cut)
            )
        except Exception as exc:  # noqa: BLE001 - one poison line must not lose the rest of the chunk
            self._poison(number, exc)
            return 0
        return 1

    def _poison(self, number: int, exc: Exception) -> None:
        """A line the decoder or the analyzer cannot take: counted as a read error, its offset still consumed."""
        self.health.read_errors += 1
        self._warn(
            "poison",
            "%s: %s line %d could not be analysed (%s); skipped and counted in vllm_headroom_log_read_errors_total",
            self.server,
            self.path,
            number,
            type(exc).__name__,
        )

    def _feed_lines(self, lines: list[tuple[bytes, int, bool]]) -> int:
        """Feed (bytes, bytes consumed from the file, cut) physical lines; advance the offsets."""
        if self._decoder is None:
            self._decoder = LineDecoder(detect_format(b"\n".join(raw for raw, _, _ in lines[:5])), self.max_line_bytes)
        with self.lock:
            return self._feed_lines_locked(lines)

    def _feed_lines_locked(self, lines: list[tuple[bytes, int, bool]]) -> int:
        dec = self._decoder
        assert dec is not None
        fed = 0
        undecodable = dec.undecodable
        for raw, consumed, cut in lines:
            self._line_no += 1
            self._offset += consumed
            self.health.lines_cut += cut
            if raw[:1] == b"\x00":  # the hole a copytruncate leaves before a writer's next line
                raw = raw.lstrip(b"\x00")
            try:
                line = dec.feed(raw, self._line_no, cut)
                if line is not None:
                    self.analyzer.feed(line)
                    fed += 1
            except Exception as exc:  # noqa: BLE001 - one poison line must not lose the rest of the chunk
                self._poison(self._line_no, exc)
            if not dec.pending:
                self._safe = (self._offset, self._line_no)
        bad = dec.undecodable - undecodable
        if bad:
            self.health.read_errors += bad
            self._warn(
                "undecodable",
                "%s: %s: %d %s record(s) could not be decoded; kept as plain text",
                self.server,
                self.path,
                bad,
                dec.format,
            )
        self.health.lines_read += fed
        self._dirty = self._dirty or fed > 0
        return fed
