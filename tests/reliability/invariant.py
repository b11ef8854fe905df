"""The one invariant every reliability scenario checks.

Test items carry a tag ``[writer, batch, index, size]``. A stored history is correct
when it is a sequence of WHOLE batches (``index`` 0..size-1, contiguous), each
writer's batches appear in the order they were committed (batch numbers strictly
increase: nothing duplicated or reordered), every batch whose commit returned is
present (nothing lost) and no batch appears that was never committed (no phantom).

The history is read from the raw rows, not through ``get_items()`` (which skips rows
that are not JSON objects): :func:`check_rows` also requires every stored row to be the
canonical JSON object text a session stores, each batch's rows to be contiguous with
consecutive keys, the session's metadata (``item_count``, ``next_seq``,
``created_at`` / ``updated_at``) to agree with the rows and the batch records, and the
turn index (docs/turns.md) to agree with the rows: each turn record's ``items`` is the
number of stored items in its key range (a record hidden by a rewind: of hidden items),
the session's ``turn_count`` the number of visible records holding items and
``turn_items`` the items those hold. (Counted here on its own, not by the package's rule
in ``sessions/_model/turnindex.py``: the checker does not share the code it checks.)
"""

from __future__ import annotations

import json
from bisect import bisect_left, bisect_right
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sessions._model.serde import encode_item

TAG = "rel"


def batch_size(writer: int, batch: int) -> int:
    """A deterministic size between 1 and 4, so batches differ."""
    return 1 + (writer * 7 + batch * 3) % 4


def make_batch(
    writer: int, batch: int, size: int | None = None, *, pad: str = ""
) -> list[dict[str, Any]]:
    n = batch_size(writer, batch) if size is None else size
    return [
        {
            "type": "message",
            "role": "user",
            "content": f"w{writer} b{batch} {i + 1}/{n}{pad}",
            TAG: [writer, batch, i, n],
        }
        for i in range(n)
    ]


def tag_of(item: Any) -> tuple[int, int, int, int] | None:
    if not isinstance(item, dict):
        return None
    tag = item.get(TAG)
    if (
        isinstance(tag, list)
        and len(tag) == 4
        and all(isinstance(x, int) and not isinstance(x, bool) for x in tag)
    ):
        w, b, i, n = tag
        return w, b, i, n
    return None


@dataclass
class Ledger:
    """What the writers know: batches whose commit returned, and batches whose
    outcome they cannot know (in flight when the process died, for example)."""

    confirmed: dict[int, list[int]] = field(default_factory=dict)
    uncertain: dict[int, set[int]] = field(default_factory=dict)

    def confirm(self, writer: int, batch: int) -> None:
        self.confirmed.setdefault(writer, []).append(batch)
        self.uncertain.get(writer, set()).discard(batch)

    def maybe(self, writer: int, batch: int) -> None:
        self.uncertain.setdefault(writer, set()).add(batch)

    def count(self) -> int:
        return sum(len(v) for v in self.confirmed.values())


def parse_batches(items: Sequence[Any]) -> tuple[list[tuple[int, int]], list[str]]:
    """Split a history into ``(writer, batch)`` runs; report anything that is not whole."""
    runs: list[tuple[int, int]] = []
    problems: list[str] = []
    pos = 0
    while pos < len(items):
        tag = tag_of(items[pos])
        if tag is None:
            problems.append(f"position {pos}: not a tagged test item: {items[pos]!r:.120}")
            pos += 1
            continue
        w, b, i, n = tag
        if i != 0:
            problems.append(f"position {pos}: batch w{w} b{b} starts at index {i} (torn batch)")
        expected = i
        start = pos
        while pos < len(items):
            t = tag_of(items[pos])
            if t is None or t[:2] != (w, b) or t[2] != expected or t[3] != n:
                break
            expected += 1
            pos += 1
            if expected == n:
                break
        if expected != n:
            problems.append(
                f"positions {start}..{pos - 1}: batch w{w} b{b} has items {i}..{expected - 1} "
                f"of {n} (partial batch)"
            )
        if pos == start:  # defensive: never loop forever on a malformed tag
            pos += 1
        runs.append((w, b))
    return runs, problems


@dataclass(frozen=True)
class RawRow:
    seq: int
    batch_id: str
    data: str


@dataclass
class RawSession:
    """What the database holds for one session, read in one snapshot."""

    session_id: str
    rows: list[RawRow]
    #: ``(item_count, next_seq, created_at, updated_at)`` of the metadata row, if any.
    meta: tuple[int, int, datetime, datetime] | None
    #: ``(batch_id, committed_at)`` of the session's batch records.
    records: list[tuple[str, datetime]] = field(default_factory=list)
    #: ``(turn_count, turn_items)`` of the metadata row (``None``: no metadata row).
    index: tuple[int, int] | None = None
    #: ``(first_seq, last_seq, hidden, items)`` of every turn record, hidden ones too.
    turns: list[tuple[int, int, bool, int]] = field(default_factory=list)
    #: The keys of the session's hidden items (moved aside by a rewind).
    hidden: list[int] = field(default_factory=list)


class History(list[Any]):
    """A stored history: the items of the rows that are valid, in order, and
    ``problems``, what :func:`check_rows` found wrong with the raw rows.
    :func:`check_history` reports those too."""

    problems: list[str]

    def __init__(self, items: Sequence[Any] = (), problems: Sequence[str] = ()) -> None:
        super().__init__(items)
        self.problems = list(problems)


def _check_row(row: RawRow) -> tuple[Any, str | None]:
    """The row's item, or ``None`` and what is wrong with it."""
    where = f"row seq {row.seq} (batch {row.batch_id})"
    try:
        value = json.loads(row.data)
    except ValueError as exc:
        return None, f"{where}: not valid JSON ({exc}): {row.data!r:.80}"
    if not isinstance(value, dict):
        return None, f"{where}: a JSON {type(value).__name__}, not an object: {row.data!r:.80}"
    try:
        canonical = encode_item(value)
    except Exception as exc:  # noqa: BLE001 - reported
        return None, f"{where}: not an item a session can store: {exc}"
    if canonical != row.data:
        return value, f"{where}: not the canonical JSON a session stores: {row.data!r:.80}"
    return value, None


def _check_layout(rows: Sequence[RawRow]) -> list[str]:
    """Keys strictly increasing; each batch's rows contiguous, with consecutive keys."""
    problems: list[str] = []
    finished: set[str] = set()
    for previous, row in zip(rows, rows[1:], strict=False):
        if row.seq <= previous.seq:
            problems.append(
                f"row seq {row.seq} stored after seq {previous.seq} (keys out of order)"
            )
        if row.batch_id == previous.batch_id:
            if row.seq != previous.seq + 1:
                problems.append(
                    f"batch {row.batch_id}: a hole between seq {previous.seq} and {row.seq} "
                    "inside the batch"
                )
            continue
        finished.add(previous.batch_id)
        if row.batch_id in finished:
            problems.append(
                f"batch {row.batch_id}: rows on both sides of batch {previous.batch_id} "
                f"(seq {row.seq}; not contiguous)"
            )
    return problems


#: Batch ids of bulk writers, whose sessions take the times of their source.
_RESTORED = ("imp-", "mig-")


def _check_meta(raw: RawSession) -> list[str]:
    """The metadata row agrees with the rows and the batch records."""
    if raw.meta is None:
        if raw.rows or raw.records:
            return [
                f"{len(raw.rows)} row(s) and {len(raw.records)} batch record(s) but no metadata row"
            ]
        return []
    count, next_seq, created, updated = raw.meta
    problems: list[str] = []
    if count != len(raw.rows):
        problems.append(f"metadata item_count {count} but {len(raw.rows)} row(s) stored")
    if raw.rows and next_seq <= raw.rows[-1].seq:
        problems.append(f"metadata next_seq {next_seq} would reuse stored seq {raw.rows[-1].seq}")
    if updated < created:
        problems.append(f"metadata updated_at {updated} before created_at {created}")
    commits = [at for batch_id, at in raw.records if not batch_id.startswith(_RESTORED)]
    if commits and updated < max(commits):
        problems.append(
            f"metadata updated_at {updated} older than the newest commit ({max(commits)})"
        )
    return problems


def _check_index(raw: RawSession) -> list[str]:
    """The turn index agrees with the rows: every record's ``items``, and the metadata
    row's ``turn_count`` and ``turn_items``."""
    if raw.index is None:
        return [f"{len(raw.turns)} turn record(s) but no metadata row"] if raw.turns else []
    visible = sorted(row.seq for row in raw.rows)
    hidden = sorted(raw.hidden)
    problems: list[str] = []
    count = held = 0
    for first, last, is_hidden, items in raw.turns:
        keys = hidden if is_hidden else visible
        n = bisect_right(keys, last) - bisect_left(keys, first)
        if items != n:
            kind = "hidden " if is_hidden else ""
            problems.append(
                f"turn record {first}..{last}{' (hidden)' if is_hidden else ''}: items {items} "
                f"but {n} {kind}item(s) stored in its range"
            )
        if not is_hidden:
            count += n > 0
            held += n
    turn_count, turn_items = raw.index
    if turn_count != count:
        problems.append(
            f"metadata turn_count {turn_count} but {count} visible turn record(s) hold items"
        )
    if turn_items != held:
        problems.append(
            f"metadata turn_items {turn_items} but the visible turn records hold {held} item(s)"
        )
    return problems


def check_rows(raw: RawSession) -> History:
    """The valid items of ``raw`` and every way its rows or metadata are wrong."""
    items: list[Any] = []
    problems: list[str] = []
    for row in raw.rows:
        value, problem = _check_row(row)
        if problem is not None:
            problems.append(problem)
        if value is not None:
            items.append(value)
    problems += _check_layout(raw.rows)
    problems += _check_meta(raw)
    problems += _check_index(raw)
    return History(items, [f"raw rows of {raw.session_id!r}: {p}" for p in problems])


def check_history(items: Sequence[Any], ledger: Ledger, *, exact: bool = True) -> list[str]:
    """Every violation of the invariant in ``items`` (empty when the history is right).

    ``items`` read by :func:`~tests.reliability.harness.read_history` (a
    :class:`History`) bring what was wrong with the raw rows; those are violations too.
    ``exact``: batches that are neither confirmed nor uncertain are phantoms.
    """
    runs, problems = parse_batches(items)
    problems = list(getattr(items, "problems", ())) + problems
    seen: dict[int, list[int]] = {}
    for w, b in runs:
        previous = seen.setdefault(w, [])
        if b in previous:
            problems.append(f"batch w{w} b{b} stored twice (duplicated)")
        elif previous and b < previous[-1]:
            problems.append(f"batch w{w} b{b} stored after b{previous[-1]} (out of commit order)")
        previous.append(b)
    for w, batches in ledger.confirmed.items():
        stored = set(seen.get(w, []))
        lost = [b for b in batches if b not in stored]
        if lost:
            problems.append(
                f"writer {w}: {len(lost)} committed batch(es) missing (lost): {lost[:10]}"
            )
    if exact:
        for w, stored_batches in seen.items():
            allowed = set(ledger.confirmed.get(w, [])) | ledger.uncertain.get(w, set())
            phantom = [b for b in stored_batches if b not in allowed]
            if phantom:
                problems.append(
                    f"writer {w}: batch(es) stored that were never committed: {phantom[:10]}"
                )
    return problems


def assert_history(items: Sequence[Any], ledger: Ledger, *, exact: bool = True) -> None:
    problems = check_history(items, ledger, exact=exact)
    assert not problems, "history invariant violated:\n  " + "\n  ".join(problems)
