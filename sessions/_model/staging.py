"""What a session has staged and not yet committed. Pure data: no I/O, no awaiting.

Changes are kept as a list of :class:`Stage` objects, each a future batch with an id
fixed when the stage is opened. A stage moves through named states:

``OPEN``
    accepting writes (only the newest stage ever does); never sent to the database.
``SENT``
    a commit attempt is applying it right now. Writes arriving meanwhile open a new stage.
``UNKNOWN``
    a commit attempt ended without knowing whether it was applied (lost connection,
    cancelled at its deadline). Its id answers the question later; until then it is
    neither merged with other stages nor dropped.

After a commit attempt: applied stages are dropped; stages whose attempt failed with a
known outcome go back to ``OPEN``; adjacent ``OPEN`` stages are merged (the earlier
absorbs the later and keeps its id), so a session that failed to commit three times
still sends one batch.

Besides items, pops and clears, a stage may carry a replacement of the end of the
history (pops plus a ``tail`` condition, see :attr:`sessions.Batch.tail`) and a write
of the session's run state. Run-state writes are checked against the version this
session last saw (``run_state_version``), assigned when the batches are sealed.

Every method is atomic with respect to other threads (one ``threading.Lock``): a
session object may be shared by threads that each run an event loop of their own.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from functools import wraps
from typing import Any, TypeVar, cast

from .backend import (
    Batch,
    InfoChange,
    RunStateChange,
    TurnRecord,
    TurnUsage,
    new_batch_id,
    staged_batch,
)
from .catalogue import merge_info
from .history import Shape
from .turns import check_usage_total

__all__ = ["PendingChanges", "Stage", "StageState", "Staging"]


#: The turn record of a batch without run id or usage (immutable, so one serves all).
_BARE_TURN = TurnRecord()


class StageState(enum.Enum):
    OPEN = "open"
    SENT = "sent"
    UNKNOWN = "unknown"


# The members once more, as plain module names: staging is on every commit's path, and
# reading ``StageState.OPEN`` runs Python code on Python 3.11.
_OPEN, _SENT, _UNKNOWN = StageState.OPEN, StageState.SENT, StageState.UNKNOWN


@dataclass(frozen=True, slots=True)
class PendingChanges:
    """A read-only view of what ``commit()`` would apply."""

    clear: bool
    """A staged ``clear_session()``: stored history goes at commit."""
    pops: int
    """How many stored items staged ``pop_item()`` calls remove at commit."""
    items: int
    """How many staged items ``add_items()`` appends at commit."""
    batches: int
    """How many batches are queued (more than one only after a failed commit)."""
    run_state: bool = False
    """A staged ``stage_run_state()`` or ``discard_run_state()``."""
    info: bool = False
    """A staged ``set_info()`` (a change of the session's catalogue entry)."""

    def __bool__(self) -> bool:
        return self.clear or self.pops > 0 or self.items > 0 or self.run_state or self.info


#: A stage's run-state write: ``(text, label)`` (``(None, None)`` removes it).
RunStateWrite = tuple[str | None, str | None]


class Stage:
    """One batch in the making."""

    __slots__ = (
        "batch_id",
        "clear",
        "info",
        "items",
        "pops",
        "run_id",
        "run_state",
        "shapes",
        "state",
        "tail",
        "usage",
    )

    def __init__(self) -> None:
        self.batch_id = new_batch_id()
        self.clear = False
        self.pops: list[int] = []
        self.items: list[str] = []
        self.shapes: list[Shape] = []  # one per item: what the history rules read of it
        self.tail: int | None = None
        self.run_state: RunStateWrite | None = None
        self.run_id: str | None = None
        self.usage: TurnUsage | None = None
        self.info: InfoChange | None = None
        self.state = _OPEN

    def empty(self) -> bool:
        return not (self.clear or self.pops or self.items or self.run_state or self.info)

    def freeze(
        self,
        expect_version: int | None,
        expect_session: int | None = None,
        incarnation: str | None = None,
    ) -> Batch:
        change = None
        if self.run_state is not None:
            text, label = self.run_state
            change = RunStateChange(text, expect_version, label)
        tail = None if self.clear else self.tail
        pops, items, shapes = tuple(self.pops), tuple(self.items), tuple(self.shapes)
        turn = None
        if items:
            no_record = self.run_id is None and self.usage is None
            turn = _BARE_TURN if no_record else TurnRecord(self.run_id, usage=self.usage)
        return staged_batch(
            self.batch_id,
            self.clear,
            pops,
            items,
            tail=tail,
            run_state=change,
            turn=turn,
            info=self.info,
            expect_version=expect_session,
            incarnation=incarnation,
            shapes=shapes,
        )

    def absorb(self, later: Stage) -> None:
        """Fold a later ``OPEN`` stage into this ``OPEN`` one (both never applied)."""
        # The turn keeps the run id set when its first item was staged.
        first_items = later.clear or not self.items
        if later.clear:
            self.clear, self.pops, self.items = True, [], list(later.items)
            self.shapes = list(later.shapes)
            self.tail = None
        else:
            self.pops.extend(later.pops)
            self.items.extend(later.items)
            self.shapes.extend(later.shapes)
            # Rows this batch appends are its own, so an earlier condition still holds.
            if self.tail is None:
                self.tail = later.tail
        if later.run_state is not None:
            self.run_state = later.run_state
        if first_items and later.items:
            self.run_id = later.run_id
        if later.usage is not None:
            self.usage = later.usage if self.usage is None else self.usage + later.usage
        if later.info is not None:
            self.info = merge_info(self.info, later.info)


F = TypeVar("F", bound=Callable[..., Any])


def _atomic(method: F) -> F:
    """Run the method holding the staging's thread lock."""

    @wraps(method)
    def locked(self: Staging, *args: Any, **kwargs: Any) -> Any:
        with self._mutex:
            return method(self, *args, **kwargs)

    return cast(F, locked)


class Staging:
    """The staged changes of one session, oldest stage first."""

    __slots__ = ("_mutex", "_stages", "run_id", "run_state_version")

    def __init__(self) -> None:
        self._stages: list[Stage] = []
        self._mutex = threading.RLock()
        #: The run id the turns staged from now on carry (``set_run_id``).
        self.run_id: str | None = None
        #: The stored run-state version this session last read or wrote (``None``: it
        #: never read one, so run-state writes are unconditional).
        self.run_state_version: int | None = None

    # ------------------------------------------------------------------ writes

    def _writable(self) -> Stage:
        if not self._stages or self._stages[-1].state is not _OPEN:
            self._stages.append(Stage())
        return self._stages[-1]

    def add(self, texts: list[str], shapes: list[Shape]) -> None:
        """Stage encoded items (appended at commit, in order) with their shapes."""
        with self._mutex:
            if len(shapes) != len(texts):
                raise ValueError("add(): one shape per text")
            if texts:
                stage = self._writable()
                if not stage.items:  # the turn keeps the run id set at its first item
                    stage.run_id = self.run_id
                stage.items.extend(texts)
                stage.shapes.extend(shapes)

    @_atomic
    def add_usage(self, usage: TurnUsage) -> bool:
        """Add ``usage`` to the turn being staged; ``False`` if no items are staged in
        the stage that takes writes (nothing to attach it to)."""
        stage = self._writable()
        if not stage.items:
            return False
        # Stages not yet applied may merge into one batch (one turn) before they are:
        # their usages together must fit the turn's columns.
        total = usage
        for each in self._stages:
            if each.usage is not None:
                total = total + each.usage
        check_usage_total(total, "the staged turns' usage")
        stage.usage = usage if stage.usage is None else stage.usage + usage
        return True

    @_atomic
    def clear(self) -> None:
        """Stage the removal of all stored history and of everything staged before."""
        stage = self._writable()
        stage.clear, stage.pops, stage.items, stage.tail = True, [], [], None
        stage.shapes = []

    @_atomic
    def pop_staged(self) -> tuple[bool, str | None]:
        """Pop the newest staged item if there is one.

        ``(True, text)``: popped from staging. ``(True, None)``: a staged clear hides
        all stored history, there is nothing to pop. ``(False, None)``: the newest item
        is stored; the caller looks it up and calls :meth:`pop_stored`.
        """
        stage = self._writable()
        if stage.items:
            stage.shapes.pop()
            return True, stage.items.pop()
        return stage.clear, None

    @_atomic
    def pop_stored(self, key: int) -> None:
        """Stage the removal of the stored row ``key``."""
        self._writable().pops.append(key)

    @_atomic
    def forget_pop(self, key: int) -> None:
        """Un-stage the removal of ``key`` (another writer removed it first)."""
        for stage in self._stages:
            if key in stage.pops:
                stage.pops.remove(key)

    @_atomic
    def replace_tail(
        self, keep: int, pops: list[int], tail: int | None, texts: list[str], shapes: list[Shape]
    ) -> None:
        """Replace the end of the history: keep the first ``keep`` staged items, stage
        the removal of the stored rows ``pops`` (checked against ``tail`` at commit,
        see :attr:`sessions.Batch.tail`), then append ``texts``.

        Only with nothing in doubt (no commit in flight or of unknown outcome), when
        every staged change sits in one stage: the caller holds the session lock and
        has settled.
        """
        live = [stage for stage in self._stages if not stage.empty()]
        if self.in_doubt() or len(live) > 1:
            raise RuntimeError("replace_tail(): staged changes span several batches")
        stage = live[0] if live else self._writable()
        if len(shapes) != len(texts):
            raise ValueError("replace_tail(): one shape per text")
        if not stage.items[:keep]:  # the turn keeps the run id set at its first item
            stage.run_id = self.run_id
        stage.items = stage.items[:keep] + texts
        stage.shapes = stage.shapes[:keep] + shapes
        stage.pops.extend(pops)
        if tail is not None:
            stage.tail = tail if stage.tail is None else min(stage.tail, tail)

    @_atomic
    def name(self, batch_id: str) -> None:
        """Give the staged changes the batch id ``batch_id`` (a writer that derives its
        ids, ``sessions.temporal``: the same id on every retry makes the commit land once).

        Only while nothing is in doubt and every staged change sits in one stage (the
        one that takes writes); else ``RuntimeError``, nothing changed.
        """
        live = [stage for stage in self._stages if not stage.empty()]
        if self.in_doubt() or len(live) != 1 or live[0] is not self._stages[-1]:
            raise RuntimeError("name(): the staged changes are not one open batch")
        live[0].batch_id = batch_id

    @_atomic
    def set_info(self, change: InfoChange) -> None:
        """Stage a change of the session's catalogue entry (merged with one staged)."""
        stage = self._writable()
        stage.info = merge_info(stage.info, change)

    @_atomic
    def set_run_state(self, text: str | None, label: str | None = None) -> None:
        """Stage a write (``None``: a removal) of the session's run state."""
        self._writable().run_state = (text, label if text is not None else None)

    # ------------------------------------------------------------------ reads

    @_atomic
    def view(self) -> tuple[bool, set[int], list[str]]:
        """``(clear, popped_keys, items)``: how staging changes the stored history."""
        clear = False
        pops: set[int] = set()
        items: list[str] = []
        for stage in self._stages:
            if stage.clear:
                clear, pops, items = True, set(), []
            pops.update(stage.pops)
            items.extend(stage.items)
        return clear, pops, items

    @_atomic
    def run_state_view(self) -> RunStateWrite | None:
        """The newest staged run-state write, or ``None`` when none is staged."""
        for stage in reversed(self._stages):
            if stage.run_state is not None:
                return stage.run_state
        return None

    @_atomic
    def pending(self) -> PendingChanges:
        clear, pops, items = self.view()
        return PendingChanges(
            clear=clear,
            pops=len(pops),
            items=len(items),
            batches=sum(1 for stage in self._stages if not stage.empty()),
            run_state=any(stage.run_state is not None for stage in self._stages),
            info=any(stage.info is not None for stage in self._stages),
        )

    def __bool__(self) -> bool:
        """``True`` when anything is staged (whatever its state)."""
        with self._mutex:
            for stage in self._stages:  # a loop, not any(): asked by every commit
                if not stage.empty():
                    return True
            return False

    @_atomic
    def in_doubt(self) -> bool:
        """``True`` when a stage is being sent or has an unknown outcome."""
        return any(stage.state is not _OPEN for stage in self._stages)

    # ------------------------------------------------------------------ commit protocol

    def seal(
        self, expected_version: int | None = None, incarnation: str | None = None
    ) -> list[Batch]:
        """Mark every non-empty stage ``SENT`` and return their batches, in order.

        ``UNKNOWN`` stages are sent again with their ids: a backend skips what it has
        already applied, so resending settles them either way. A run-state write is
        checked against the version the previous one leads to. ``expected_version``
        becomes the first batch's :attr:`~sessions.Batch.expect_version` (the caller
        settles unknown outcomes first, so that batch is one that was never applied).
        ``incarnation``: every batch's :attr:`~sessions.Batch.incarnation` (the life of
        the session they were made against).
        """
        with self._mutex:
            stages = self._stages
            if len(stages) != 1 or stages[0].empty():  # one stage: the usual commit
                stages = self._stages = [stage for stage in stages if not stage.empty()]
            batches: list[Batch] = []
            version = self.run_state_version
            for index, stage in enumerate(self._stages):
                stage.state = _SENT
                expect = expected_version if index == 0 else None
                batches.append(stage.freeze(version, expect, incarnation))
                if stage.run_state is not None and version is not None:
                    version += 1
            return batches

    def applied(self, batch_ids: Collection[str]) -> None:
        """Drop the stages whose batches are known to be applied."""
        with self._mutex:
            kept: list[Stage] = []
            for stage in self._stages:
                if stage.batch_id not in batch_ids:
                    kept.append(stage)
                elif stage.run_state is not None and self.run_state_version is not None:
                    self.run_state_version += 1
            self._stages = kept

    @_atomic
    def failed(self, *, known: bool, unknown: Collection[str] = ()) -> None:
        """The commit attempt of the ``SENT`` stages failed; ``known``: nothing applied.

        ``unknown``: ids of stages whose outcome was unknown before this attempt; they
        stay ``UNKNOWN`` even when this attempt is known to have sent nothing.
        """
        for stage in self._stages:
            if stage.state is _SENT:
                doubt = not known or stage.batch_id in unknown
                stage.state = _UNKNOWN if doubt else _OPEN
        self._merge()

    def unresolved(self) -> list[str]:
        """Ids of the ``UNKNOWN`` stages, to ask the database about."""
        with self._mutex:
            found: list[str] = []
            for stage in self._stages:  # a loop, not a comprehension: asked by every commit
                if stage.state is _UNKNOWN:
                    found.append(stage.batch_id)
            return found

    @_atomic
    def resolve(self, applied: Collection[str]) -> None:
        """The database answered: drop applied ``UNKNOWN`` stages, reopen the rest."""
        self.applied(applied)
        for stage in self._stages:
            if stage.state is _UNKNOWN:
                stage.state = _OPEN
        self._merge()

    @_atomic
    def discard(self) -> bool:
        """Drop everything staged; ``True`` if a dropped stage may already be applied."""
        doubtful = self.in_doubt()
        if doubtful and any(stage.run_state is not None for stage in self._stages):
            self.run_state_version = None  # it may have moved on: read it again
        self._stages = []
        return doubtful

    def _merge(self) -> None:
        merged: list[Stage] = []
        for stage in self._stages:
            if stage.empty() and stage.state is _OPEN and stage is not self._stages[-1]:
                continue
            previous = merged[-1] if merged else None
            if previous is not None and previous.state is _OPEN and stage.state is _OPEN:
                previous.absorb(stage)
            else:
                merged.append(stage)
        self._stages = merged
