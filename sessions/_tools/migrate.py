"""Copy history out of the Agents SDK's own session stores into a txsessions store.

Sources (``--from``): see :mod:`sessions._tools.sources`, whose readers this module copies
from: files of ``SQLiteSession`` / ``AsyncSQLiteSession`` / ``AdvancedSQLiteSession``,
or ``SQLAlchemySession`` tables through any SQLAlchemy async URL.

Resumable and idempotent, through the core's commit path (:mod:`sessions._engine.bulk`:
retried, shielded, bounded by the store's ``commit_timeout``). Every session gets a
marker batch (no items) the first time it is migrated, then its items in chunks whose
batch ids depend only on the session, the chunk's position and its content. A rerun
resumes each session after the items it already has, and backends skip batch ids
already applied, so an interrupted or repeated migration never duplicates anything. A target session that exists but has no marker was not written by
a migration: it is left alone and reported. At the end, the number of items of every
session is compared between source and target.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._engine.bulk import CHUNK_ITEMS, ChunkWriter
from .._engine.store import Store
from .._model.backend import TurnRecord
from .._model.serde import encode_item
from .._model.validate import validate_session_id
from ..errors import InvalidItemError, InvalidSessionIdError
from .sources import AdvancedPlan, MigrationError, Source, SQLiteFileSource, open_source

__all__ = [
    "MigrationError",
    "MigrationReport",
    "Mismatch",
    "Source",
    "migrate",
    "open_source",
]


Progress = Callable[[int], None]


@dataclass(frozen=True, slots=True)
class Mismatch:
    session_id: str
    source_items: int
    target_items: int | None  # None: the session is missing in the target
    reason: str = ""

    def describe(self) -> str:
        if self.reason:
            return f"session {self.session_id!r}: {self.reason}"
        target = "missing" if self.target_items is None else f"{self.target_items} items"
        return (
            f"session {self.session_id!r}: source has {self.source_items} items, "
            f"target has {target}"
        )


@dataclass
class MigrationReport:
    """What :func:`migrate` did; :attr:`ok` when every session the source has was
    copied whole (or was there already)."""

    sessions: int = 0
    """Sessions the source has."""
    source_rows: int = 0
    """Item rows the source has, corrupt ones included."""
    copied: int = 0
    """Items written to the target by this run."""
    already_present: int = 0
    """Items the target had already (from an earlier, perhaps interrupted, run)."""
    corrupt_skipped: int = 0
    """Source rows that are not a JSON object: not history (the SDK skips them too)."""
    mismatches: list[Mismatch] = field(default_factory=list)
    """Sessions left uncopied or whose item counts differ at the end."""

    @property
    def ok(self) -> bool:
        """No session was left uncopied and every count matches."""
        return not self.mismatches


def _legacy_marker_id(session_id: str) -> str:
    """The marker id written by txsessions 0.1 (before one batch-id scheme for all)."""
    digest = hashlib.sha256(f"mig\0{session_id}\0-1\00".encode()).hexdigest()
    return f"mig-{digest[:40]}"


async def _migrated_before(store: Store[Any], writer: ChunkWriter) -> bool:
    if await writer.has_marker():
        return True
    legacy = _legacy_marker_id(writer.session_id)
    return legacy in await store.backend.applied(writer.session_id, [legacy])


async def migrate(
    source: Source,
    store: Store[Any],
    *,
    progress: Progress | None = None,
    on_total: Callable[[int], None] | None = None,
    chunk_items: int = CHUNK_ITEMS,
) -> MigrationReport:
    """Copy every session of ``source`` into ``store``; see the module docstring."""
    report = MigrationReport()
    sessions = await source.sessions()
    report.sessions = len(sessions)
    report.source_rows = sum(count for _, count in sessions)
    if on_total is not None:
        on_total(report.source_rows)
    expected: dict[str, int] = {}
    for session_id, rows in sessions:
        copied = await _migrate_session(
            source, store, session_id, rows, report, progress, chunk_items
        )
        if copied is not None:
            expected[session_id] = copied
    for session_id, want in expected.items():
        info = await store.session_info(session_id)
        got = info.item_count if info is not None else None
        if got != want:
            report.mismatches.append(Mismatch(session_id, want, got))
    return report


async def _migrate_session(
    source: Source,
    store: Store[Any],
    session_id: str,
    rows: int,
    report: MigrationReport,
    progress: Progress | None,
    chunk_items: int,
) -> int | None:
    """Copy one session; how many items it should have in the target (``None``: skipped)."""
    try:
        validate_session_id(session_id)
    except InvalidSessionIdError as exc:
        report.mismatches.append(Mismatch(session_id, rows, None, f"not copied: {exc}"))
        if progress is not None:
            progress(rows)
        return None
    writer = ChunkWriter(store, session_id, "mig", chunk_items=chunk_items)
    info = await store.session_info(session_id)
    have = info.item_count if info is not None else 0
    if info is not None and not await _migrated_before(store, writer):
        reason = (
            "already exists in the target and was not written by a migration: "
            "left untouched (delete it there to migrate it)"
        )
        report.mismatches.append(Mismatch(session_id, rows, have, reason))
        if progress is not None:
            progress(rows)
        return None
    if info is not None and have == rows:
        # Fast path for reruns: everything is there (no corrupt rows to account for).
        report.already_present += rows
        if progress is not None:
            progress(rows)
        return rows
    plan = await source.plan(session_id) if isinstance(source, SQLiteFileSource) else None
    if plan is not None:
        if info is None:
            await writer.mark(branch=plan.branch)
        return await _copy_turns(plan, writer, have, report, progress)
    if info is None:
        await writer.mark()
    return await _copy_session(source, writer, have, report, progress)


async def _copy_turns(
    plan: AdvancedPlan,
    writer: ChunkWriter,
    have: int,
    report: MigrationReport,
    progress: Progress | None,
) -> int:
    """Append an AdvancedSQLiteSession branch after its first ``have`` items, one batch
    (one turn record, with the turn's usage) per SDK turn; return how many it has."""
    valid = 0
    writer.position = have
    writer.chunk_items = writer.chunk_bytes = 1 << 62  # a turn is one batch, whole
    for turn in plan.turns:
        texts = [text for text in map(_decode, turn.texts) if text is not None]
        report.corrupt_skipped += len(turn.texts) - len(texts)
        skip = min(len(texts), max(0, have - valid))
        valid += len(texts)
        report.already_present += skip
        for text in texts[skip:]:
            await writer.add(text)
        await writer.flush(TurnRecord(usage=plan.usage.get(turn.number)))
        if progress is not None:
            progress(len(turn.texts))
    report.copied += writer.added
    report.already_present += writer.already_present
    return valid


async def _copy_session(
    source: Source,
    writer: ChunkWriter,
    have: int,
    report: MigrationReport,
    progress: Progress | None,
) -> int:
    """Append the source items after the first ``have``; return how many the source has.

    Chunks start at ``have`` and every ``chunk_items`` after it, and their ids depend
    only on (session, start, content): a rerun, or a concurrent run, that resumes at a
    chunk boundary produces the same ids, which the backend skips.
    """
    valid = 0  # valid source items seen so far
    writer.position = have
    async for page in source.rows(writer.session_id, writer.chunk_items):
        for text in page:
            encoded = _decode(text)
            if encoded is None:
                report.corrupt_skipped += 1
                continue
            valid += 1
            if valid <= have:
                report.already_present += 1
                continue
            await writer.add(encoded)
        if progress is not None:
            progress(len(page))
    await writer.flush()
    report.copied += writer.added
    report.already_present += writer.already_present
    return valid


def _decode(text: str) -> str | None:
    """The stored item in our canonical form, or ``None`` if it is not a JSON object
    (the SDK's sessions skip such rows when reading, so they are not history)."""
    try:
        value = json.loads(text)
    except (ValueError, TypeError):
        return None
    if not isinstance(value, dict):
        return None
    try:
        return encode_item(value)
    except InvalidItemError:
        return None
