"""Export sessions to JSON Lines and import them back, streaming both ways.

The file format is :mod:`sessions._tools.exportfile`'s, which also checks every line of an
import file.

Export reads each session a page at a time (``AdminBackend.read_range``), so memory
stays constant whatever the size of the history. Import reads the file twice: once to
validate every line (a corrupt line stops everything before anything is written), then
to apply items in chunks through the core's commit path (:mod:`sessions._engine.bulk`:
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
written with its last chunk (:attr:`~sessions._model.backend.Batch.restore_times`), and the
catalogue entry of the export, written with its marker (:attr:`~sessions.Batch.info`).
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, Any, Literal

from .._engine.bulk import CHUNK_ITEMS, ChunkWriter
from .._engine.store import Store
from .._model.backend import AdminBackend, InfoChange, SessionInfo
from ..errors import SessionError
from .exportfile import (
    EXPORT_FORMAT,
    EXPORT_VERSION,
    ITEM_SUFFIX,
    ImportFileError,
    end_line,
    header_line,
    item_prefix,
    scan_import,
    session_line,
)

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

PAGE_SIZE = 500

ImportMode = Literal["skip", "append", "replace"]
#: What ``import_sessions(mode=...)`` accepts; the first is the default.
IMPORT_MODES: tuple[ImportMode, ...] = ("skip", "append", "replace")

Progress = Callable[[int], None]


class UnknownSessionError(SessionError, LookupError):
    """A session id that the store has never committed to."""


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
        writer.write(header_line(datetime.now(timezone.utc)))
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
    writer.write(session_line(info))
    prefix = item_prefix(session_id)
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
            writer.write(prefix + text + ITEM_SUFFIX)
            count += 1
        if progress is not None and rows:
            progress(len(rows))
        if len(rows) < page_size:
            break
        after = rows[-1][0]
    writer.write(end_line(session_id, count))
    result.sessions += 1
    result.items += count


# --------------------------------------------------------------------------- import


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
