"""Export sessions to JSON Lines and import them back, streaming both ways.

The file format (version 1), one JSON object per line::

    {"type": "header", "format": "txsessions-export", "version": 1, "exported_at": "..."}
    {"type": "session", "session": "abc", "created_at": "...", "updated_at": "..."}
      (and, when set, the catalogue: "user_id", "title", "tags", "metadata", "ttl_seconds")
    {"type": "item", "session": "abc", "item": {...}}          (one line per item, in order)
    {"type": "end", "session": "abc", "items": 2}

Export reads each session a page at a time (``AdminBackend.read_range``), so memory
stays constant whatever the size of the history. Import reads the file twice: once to
validate every line (a corrupt line stops everything before anything is written), then
to apply items in chunks through the core's commit path (:mod:`sessions._bulk`:
retried, shielded, bounded by the store's ``commit_timeout``). Each chunk is one batch
whose id is derived from the session id, the chunk's position among that session's
items in the file and its content, and backends skip batch ids they have already
applied: importing the same file twice adds nothing, and an interrupted import can
simply be run again (these records are never pruned).

What happens to a session of the file that the store already has is the ``mode``:

* ``skip`` (default): left alone, reported, unless this same history (same items, in
  the same order) was imported into it before, in which case the import carries on
  where it stopped. So importing an export back into the store it came from, or the
  same file twice, never duplicates a history.
* ``append``: the file's items go after the items the session has.
* ``replace``: the session is deleted first (history, metadata, batch records, its own
  fork record), then imported. Not one transaction with the import: if interrupted,
  run it again. The records of the sessions forked from it are kept (those sessions
  still exist, holding the turns they were forked with): ``branches()`` still lists
  them. An export carries no fork records, so the imported session is no fork.

Before the first chunk of a session, a marker batch (no items) records how this
content was imported (``created`` or ``appended``, with a digest of the session's items
in the file): that is what tells "imported before" from "already there". A session the
import creates (or replaces) takes the ``created_at`` / ``updated_at`` of the export,
written with its last chunk (:attr:`~sessions._backend.Batch.restore_times`), and the
catalogue entry of the export, written with its marker (:attr:`~sessions.Batch.info`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import IO, Any, Literal

from ._backend import AdminBackend, InfoChange, SessionInfo
from ._bulk import CHUNK_ITEMS, ChunkWriter
from ._catalogue import info_change, validate_ttl_seconds
from ._serde import encode_item
from ._store import Store
from ._validate import iso_utc, validate_session_id
from .errors import InvalidItemError, InvalidSessionIdError, SessionError

__all__ = [
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "IMPORT_MODES",
    "ExportResult",
    "ImportFileError",
    "ImportMode",
    "ImportResult",
    "UnknownSessionError",
    "admin_backend",
    "export_sessions",
    "import_sessions",
    "plan_export",
    "scan_import",
]

EXPORT_FORMAT = "txsessions-export"
EXPORT_VERSION = 1
PAGE_SIZE = 500

ImportMode = Literal["skip", "append", "replace"]
#: What ``import_sessions(mode=...)`` accepts; the first is the default.
IMPORT_MODES: tuple[ImportMode, ...] = ("skip", "append", "replace")

Progress = Callable[[int], None]


class UnknownSessionError(SessionError, LookupError):
    """A session id that the store has never committed to."""


class ImportFileError(SessionError, ValueError):
    """An import file that is not a valid export. ``line`` is 1-based."""

    def __init__(self, path: str, line: int, message: str) -> None:
        super().__init__(f"{path}, line {line}: {message}")
        self.path = path
        self.line = line


def admin_backend(store: Store[Any], operation: str) -> AdminBackend:
    """The store's backend as an :class:`AdminBackend` (what export/import need)."""
    backend = store.backend
    if not isinstance(backend, AdminBackend):
        raise SessionError(
            f"{operation}: {type(backend).__name__} does not support store operations"
        )
    return backend


def _refuse_constant(name: str) -> Any:
    """``NaN`` / ``Infinity`` in a stored row: not JSON, so not history (import refuses it)."""
    raise ValueError(f"{name} is not JSON")


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# --------------------------------------------------------------------------- export


@dataclass
class ExportResult:
    sessions: int = 0
    items: int = 0
    skipped_corrupt: int = 0


async def plan_export(store: Store[Any], session_ids: Sequence[str] | None) -> tuple[int, int]:
    """``(sessions, items)`` an export of ``session_ids`` (all when empty) will write.

    Raises :class:`UnknownSessionError` naming every id the store does not have.
    """
    if session_ids:
        unknown: list[str] = []
        items = 0
        for session_id in dict.fromkeys(session_ids):
            info = await store.session_info(session_id)
            if info is None:
                unknown.append(session_id)
            else:
                items += info.item_count
        if unknown:
            names = ", ".join(repr(s) for s in unknown)
            raise UnknownSessionError(f"unknown session{'s' if len(unknown) > 1 else ''}: {names}")
        return len(dict.fromkeys(session_ids)), items
    sessions = items = 0
    async for info in store.iter_sessions():
        sessions += 1
        items += info.item_count
    return sessions, items


class _Writer:
    """Writes the export to a temporary file next to ``path``, renamed into place
    only when complete (``-`` writes to standard output)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._tmp: str | None = None
        self.out: IO[str]
        if path == "-":
            self.out = sys.stdout
            return
        directory = os.path.dirname(os.path.abspath(path))
        if os.path.isdir(path):
            raise IsADirectoryError(f"cannot write {path}: it is a directory")
        try:
            fd, self._tmp = tempfile.mkstemp(
                prefix=f".{os.path.basename(path)}.", suffix=".part", dir=directory
            )
        except OSError as exc:
            reason = exc.strerror or str(exc)
            if isinstance(exc, FileNotFoundError):
                reason = f"directory {directory} does not exist"
            raise OSError(f"cannot write {path}: {reason}") from None
        self.out = os.fdopen(fd, "w", encoding="utf-8", newline="\n")

    def write(self, line: str) -> None:
        self.out.write(line)

    def commit(self) -> None:
        if self._tmp is None:
            self.out.flush()
            return
        self.out.flush()
        os.fsync(self.out.fileno())
        self.out.close()
        os.replace(self._tmp, self.path)
        self._tmp = None

    def abort(self) -> None:
        if self._tmp is None:
            return
        self.out.close()
        try:
            os.unlink(self._tmp)
        except OSError:
            pass
        self._tmp = None


async def export_sessions(
    store: Store[Any],
    path: str,
    session_ids: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
    page_size: int = PAGE_SIZE,
) -> ExportResult:
    """Write ``session_ids`` (every session when empty) to ``path`` as JSON Lines.

    The file appears only once complete. Stored rows that are not valid JSON objects
    are skipped (as ``get_items`` skips them) and counted in ``skipped_corrupt``.
    """
    admin = admin_backend(store, "export")
    await plan_export(store, session_ids)  # fail on unknown ids before writing anything
    writer = _Writer(path)
    result = ExportResult()
    try:
        writer.write(
            _dumps(
                {
                    "type": "header",
                    "format": EXPORT_FORMAT,
                    "version": EXPORT_VERSION,
                    "exported_at": iso_utc(datetime.now(timezone.utc)),
                }
            )
            + "\n"
        )
        if session_ids:
            for session_id in dict.fromkeys(session_ids):
                info = await store.session_info(session_id)
                if info is None:
                    raise UnknownSessionError(
                        f"session {session_id!r} was deleted during the export"
                    )
                await _export_one(admin, writer, info, result, progress, page_size)
        else:
            async for info in store.iter_sessions():
                await _export_one(admin, writer, info, result, progress, page_size)
        writer.commit()
    except BaseException:
        writer.abort()
        raise
    return result


async def _export_one(
    admin: AdminBackend,
    writer: _Writer,
    info: SessionInfo,
    result: ExportResult,
    progress: Progress | None,
    page_size: int,
) -> None:
    session_id = info.session_id
    sid = _dumps(session_id)
    header = {
        "type": "session",
        "session": session_id,
        "created_at": iso_utc(info.created_at),
        "updated_at": iso_utc(info.updated_at),
        **_catalogue_fields(info),
    }
    writer.write(_dumps(header) + "\n")
    prefix = '{"type":"item","session":' + sid + ',"item":'
    after: int | None = None
    count = 0
    while True:
        rows = await admin.read_range(session_id, after=after, limit=page_size)
        for _key, text in rows:
            try:
                valid = isinstance(json.loads(text, parse_constant=_refuse_constant), dict)
            except ValueError:
                valid = False
            if not valid:
                result.skipped_corrupt += 1
                continue
            # The stored text is already canonical JSON: written as is, byte for byte.
            writer.write(prefix + text + "}\n")
            count += 1
        if progress is not None and rows:
            progress(len(rows))
        if len(rows) < page_size:
            break
        after = rows[-1][0]
    writer.write(_dumps({"type": "end", "session": session_id, "items": count}) + "\n")
    result.sessions += 1
    result.items += count


def _catalogue_fields(info: SessionInfo) -> dict[str, Any]:
    """The session's catalogue entry for its export line (only the fields set)."""
    fields: dict[str, Any] = {
        "user_id": info.user_id,
        "title": info.title,
        "tags": list(info.tags) or None,
        "metadata": info.metadata,
        "ttl_seconds": None if info.ttl is None else info.ttl.total_seconds(),
    }
    return {name: value for name, value in fields.items() if value is not None}


# --------------------------------------------------------------------------- import


@dataclass(frozen=True, slots=True)
class _Record:
    line: int
    kind: str  # "session", "item", "end"
    session_id: str
    text: str = ""  # the item, canonical JSON (kind == "item")
    times: tuple[datetime, datetime] | None = None  # (created, updated) (kind == "session")
    info: InfoChange | None = None  # the catalogue entry (kind == "session")


@dataclass
class ImportResult:
    """What an import did. ``items`` and ``sessions`` count the file."""

    sessions: int = 0
    items: int = 0
    added: int = 0
    """Items written."""
    already_present: int = 0
    """Items of histories imported before (nothing written for them)."""
    skipped: list[str] = field(default_factory=list)
    """Sessions left alone: already in the store, not from this import (mode ``skip``)."""
    skipped_items: int = 0
    replaced: list[str] = field(default_factory=list)
    """Sessions deleted and imported again (mode ``replace``)."""
    session_ids: set[str] = field(default_factory=set, repr=False)


@dataclass
class _Plan:
    """One session of the file, from the first pass: how many items, their digest,
    the export's times."""

    items: int = 0
    digest: Any = field(default_factory=hashlib.sha256)
    times: tuple[datetime, datetime] | None = None
    info: InfoChange | None = None


def _read_lines(path: str) -> Iterator[tuple[int, str]]:
    """``(line_number, text)`` of every non-blank line, decoded as UTF-8."""
    try:
        handle = open(path, "rb")  # noqa: SIM115 - closed below, even on error
    except FileNotFoundError:
        raise FileNotFoundError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise IsADirectoryError(f"{path} is a directory, not an export file") from None
    with handle:
        for number, raw in enumerate(handle, 1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise ImportFileError(path, number, f"not UTF-8 text ({exc.reason})") from None
            if text.strip():
                yield number, text


class _Scanner:
    """Checks the lines of one export file in order; see :func:`scan_import`."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.current: tuple[str, int, int] | None = None  # (session id, opened at, items)
        self.first = True

    def bad(self, number: int, message: str) -> ImportFileError:
        return ImportFileError(self.path, number, message)

    def parse(self, number: int, text: str) -> dict[str, Any] | None:
        """The line as a JSON object; ``None`` for the header line."""
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise self.bad(number, f"not valid JSON ({exc})") from None
        if not isinstance(value, dict):
            raise self.bad(number, f"expected a JSON object, got {type(value).__name__}")
        first, self.first = self.first, False
        if value.get("type") != "header":
            return value
        if not first:
            raise self.bad(number, "a header line may only be the first line")
        if value.get("format") != EXPORT_FORMAT:
            raise self.bad(number, f"not a txsessions export (format {value.get('format')!r})")
        version = value.get("version")
        if not isinstance(version, int) or version > EXPORT_VERSION:
            raise self.bad(
                number,
                f"export format version {version!r} is newer than this txsessions reads "
                f"({EXPORT_VERSION}); upgrade txsessions",
            )
        return None

    def record(self, number: int, value: dict[str, Any]) -> _Record:
        kind = value.get("type")
        if kind not in ("session", "item", "end"):
            raise self.bad(number, f"unknown line type {kind!r} (expected session, item or end)")
        session_id = value.get("session")
        try:
            validate_session_id(session_id)
        except InvalidSessionIdError as exc:
            raise self.bad(number, f"bad session id: {exc}") from None
        assert isinstance(session_id, str)
        if kind == "session":
            record = self.open_session(number, session_id, self.times(number, value))
            return _Record(
                number, "session", session_id, times=record.times, info=self.info(number, value)
            )
        if kind == "item":
            return self.item(number, session_id, value.get("item"))
        return self.end(number, session_id, value.get("items"))

    def info(self, number: int, value: dict[str, Any]) -> InfoChange | None:
        """The session line's catalogue entry (``None``: it has none)."""
        fields = {
            name: value[key]
            for name, key in (
                ("user_id", "user_id"),
                ("title", "title"),
                ("tags", "tags"),
                ("metadata", "metadata"),
                ("ttl", "ttl_seconds"),
            )
            if value.get(key) is not None
        }
        if not fields:
            return None
        try:
            ttl = fields.get("ttl")
            if ttl is not None:
                if isinstance(ttl, bool) or not isinstance(ttl, (int, float)):
                    raise TypeError(f"ttl_seconds must be a number, got {type(ttl).__name__}")
                fields["ttl"] = timedelta(seconds=validate_ttl_seconds(ttl, "ttl_seconds"))
            return info_change(**fields)
        except (TypeError, ValueError, OverflowError) as exc:
            raise self.bad(number, f"bad catalogue entry: {exc}") from None

    def times(self, number: int, value: dict[str, Any]) -> tuple[datetime, datetime] | None:
        """The session line's ``(created_at, updated_at)``; ``None`` if it has neither."""
        raw = (value.get("created_at"), value.get("updated_at"))
        if raw == (None, None):
            return None
        parsed: list[datetime] = []
        for name, text in zip(("created_at", "updated_at"), raw, strict=True):
            moment = _parse_time(text)
            if moment is None:
                raise self.bad(
                    number, f"{name} must be an ISO 8601 time with a UTC offset, got {text!r}"
                )
            parsed.append(moment)
        if parsed[0] > parsed[1]:
            raise self.bad(number, f"created_at {raw[0]!r} is after updated_at {raw[1]!r}")
        return parsed[0], parsed[1]

    def open_session(
        self, number: int, session_id: str, times: tuple[datetime, datetime] | None
    ) -> _Record:
        if self.current is not None:
            raise self.bad(
                number,
                f"session {session_id!r} starts before session {self.current[0]!r} "
                f"(line {self.current[1]}) ended: its end line is missing",
            )
        self.current = (session_id, number, 0)
        return _Record(number, "session", session_id, times=times)

    def item(self, number: int, session_id: str, item: Any) -> _Record:
        current = self.current
        if current is not None and current[0] != session_id:
            raise self.bad(
                number,
                f"item of session {session_id!r} inside session {current[0]!r} "
                f"(opened at line {current[1]})",
            )
        try:
            encoded = encode_item(item)
        except InvalidItemError as exc:
            raise self.bad(number, f"bad item: {exc}") from None
        if current is not None:
            self.current = (current[0], current[1], current[2] + 1)
        return _Record(number, "item", session_id, encoded)

    def end(self, number: int, session_id: str, declared: Any) -> _Record:
        current = self.current
        if current is None or current[0] != session_id:
            raise self.bad(number, f"end of session {session_id!r}, which is not open here")
        if isinstance(declared, bool) or not isinstance(declared, int):
            raise self.bad(number, f"end line needs an integer 'items', got {declared!r}")
        if declared != current[2]:
            raise self.bad(
                number,
                f"session {session_id!r} declares {declared} items but the file has "
                f"{current[2]} (from line {current[1]}): the file was cut or edited",
            )
        self.current = None
        return _Record(number, "end", session_id)


def _parse_time(text: Any) -> datetime | None:
    """An ISO 8601 time with an offset (``Z`` too) as an aware datetime, else ``None``."""
    if not isinstance(text, str):
        return None
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def scan_import(path: str) -> Iterator[_Record]:
    """Parse and check an export file, yielding its session/item/end records.

    Raises :class:`ImportFileError` at the first bad line, naming it.
    """
    scanner = _Scanner(path)
    last_line = 0
    for number, text in _read_lines(path):
        last_line = number
        value = scanner.parse(number, text)
        if value is not None:
            yield scanner.record(number, value)
    if scanner.current is not None:
        session_id, opened, _ = scanner.current
        raise ImportFileError(
            path,
            last_line,
            f"the file ends inside session {session_id!r} (opened at line {opened}): "
            "it is truncated",
        )


async def import_sessions(
    store: Store[Any],
    path: str,
    *,
    mode: ImportMode = "skip",
    progress: Progress | None = None,
    on_total: Progress | None = None,
    chunk_items: int = CHUNK_ITEMS,
) -> ImportResult:
    """Import every session of an export file into ``store``; see the module doc.

    ``mode`` decides what happens to sessions the store already has: ``"skip"``
    (default), ``"append"`` or ``"replace"``. Idempotent in every mode: running the
    same import again adds nothing. Raises :class:`ImportFileError` (nothing written)
    when any line is bad.
    """
    if mode not in IMPORT_MODES:
        raise ValueError(f"mode must be one of {', '.join(IMPORT_MODES)}; got {mode!r}")
    admin_backend(store, "import")  # fail early on a store that cannot take batches
    plans = _first_pass(path)  # validates everything before anything is written
    total = ImportResult(sessions=len(plans), session_ids=set(plans))
    total.items = sum(plan.items for plan in plans.values())
    if on_total is not None:
        on_total(total.items)
    writers: dict[str, ChunkWriter | None] = {}  # None: skipped
    current: ChunkWriter | None = None
    current_id: str | None = None
    for record in scan_import(path):  # pass 2: apply
        if record.session_id != current_id:
            if current is not None:
                await current.flush()
            current_id = record.session_id
            if current_id not in writers:
                writers[current_id] = await _start_session(
                    store, current_id, plans[current_id], mode, total, progress, chunk_items
                )
            current = writers[current_id]
        if current is None:
            continue
        if record.kind == "item":
            await current.add(record.text)
        elif record.kind == "end":
            await current.flush()
    if current is not None:
        await current.flush()
    for writer in writers.values():
        if writer is not None:
            total.added += writer.added
            total.already_present += writer.already_present
    return total


def _first_pass(path: str) -> dict[str, _Plan]:
    """Check the whole file; per session: item count, digest of the items, times."""
    plans: dict[str, _Plan] = {}
    for record in scan_import(path):
        plan = plans.setdefault(record.session_id, _Plan())
        if record.kind == "item":
            plan.items += 1
            plan.digest.update(record.text.encode("utf-8", "surrogatepass") + b"\n")
        elif record.kind == "session" and plan.times is None:
            plan.times = record.times
            plan.info = record.info
    return plans


async def _start_session(
    store: Store[Any],
    session_id: str,
    plan: _Plan,
    mode: ImportMode,
    result: ImportResult,
    progress: Progress | None,
    chunk_items: int,
) -> ChunkWriter | None:
    """Decide what to do with one session (see the module doc); ``None``: skip it.

    Writes the session's marker, which creates the session if it is new.
    """
    writer = ChunkWriter(
        store, session_id, "imp", chunk_items=chunk_items, progress=progress, total=plan.items
    )
    digest = plan.digest.hexdigest()
    created, appended = writer.marker_id("created", digest), writer.marker_id("appended", digest)
    kind = "created"
    if mode == "replace":
        # The sessions forked from it still exist: their records stay (docs/cli.md).
        if await store.delete_session(session_id, keep_forks=True):
            result.replaced.append(session_id)
    elif await store.session_info(session_id) is not None and not await writer.present(created):
        if await writer.present(appended) or mode == "append":
            kind = "appended"
        else:
            result.skipped.append(session_id)
            result.skipped_items += plan.items
            if progress is not None:
                progress(plan.items)
            return None
    if kind == "created":
        writer.restore_times = plan.times
        writer.info = plan.info
    await writer.mark(kind, digest)
    return writer
