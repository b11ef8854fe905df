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
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Collection
from dataclasses import dataclass

from ._backend import Batch

__all__ = ["PendingChanges", "Stage", "StageState", "Staging"]


class StageState(enum.Enum):
    OPEN = "open"
    SENT = "sent"
    UNKNOWN = "unknown"


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

    def __bool__(self) -> bool:
        return self.clear or self.pops > 0 or self.items > 0


class Stage:
    """One batch in the making."""

    __slots__ = ("batch_id", "clear", "items", "pops", "state")

    def __init__(self) -> None:
        self.batch_id = uuid.uuid4().hex
        self.clear = False
        self.pops: list[int] = []
        self.items: list[str] = []
        self.state = StageState.OPEN

    def empty(self) -> bool:
        return not (self.clear or self.pops or self.items)

    def freeze(self) -> Batch:
        return Batch(self.batch_id, self.clear, tuple(self.pops), tuple(self.items))

    def absorb(self, later: Stage) -> None:
        """Fold a later ``OPEN`` stage into this ``OPEN`` one (both never applied)."""
        if later.clear:
            self.clear, self.pops, self.items = True, [], list(later.items)
        else:
            self.pops.extend(later.pops)
            self.items.extend(later.items)


class Staging:
    """The staged changes of one session, oldest stage first."""

    __slots__ = ("_stages",)

    def __init__(self) -> None:
        self._stages: list[Stage] = []

    # ------------------------------------------------------------------ writes

    def _writable(self) -> Stage:
        if not self._stages or self._stages[-1].state is not StageState.OPEN:
            self._stages.append(Stage())
        return self._stages[-1]

    def add(self, texts: list[str]) -> None:
        """Stage encoded items (appended at commit, in order)."""
        if texts:
            self._writable().items.extend(texts)

    def clear(self) -> None:
        """Stage the removal of all stored history and of everything staged before."""
        stage = self._writable()
        stage.clear, stage.pops, stage.items = True, [], []

    def pop_staged(self) -> tuple[bool, str | None]:
        """Pop the newest staged item if there is one.

        ``(True, text)``: popped from staging. ``(True, None)``: a staged clear hides
        all stored history, there is nothing to pop. ``(False, None)``: the newest item
        is stored; the caller looks it up and calls :meth:`pop_stored`.
        """
        stage = self._writable()
        if stage.items:
            return True, stage.items.pop()
        return stage.clear, None

    def pop_stored(self, key: int) -> None:
        """Stage the removal of the stored row ``key``."""
        self._writable().pops.append(key)

    def forget_pop(self, key: int) -> None:
        """Un-stage the removal of ``key`` (another writer removed it first)."""
        for stage in self._stages:
            if key in stage.pops:
                stage.pops.remove(key)

    # ------------------------------------------------------------------ reads

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

    def pending(self) -> PendingChanges:
        clear, pops, items = self.view()
        return PendingChanges(
            clear=clear,
            pops=len(pops),
            items=len(items),
            batches=sum(1 for stage in self._stages if not stage.empty()),
        )

    def __bool__(self) -> bool:
        """``True`` when anything is staged (whatever its state)."""
        return any(not stage.empty() for stage in self._stages)

    def in_doubt(self) -> bool:
        """``True`` when a stage is being sent or has an unknown outcome."""
        return any(stage.state is not StageState.OPEN for stage in self._stages)

    # ------------------------------------------------------------------ commit protocol

    def seal(self) -> list[Batch]:
        """Mark every non-empty stage ``SENT`` and return their batches, in order.

        ``UNKNOWN`` stages are sent again with their ids: a backend skips what it has
        already applied, so resending settles them either way.
        """
        self._stages = [stage for stage in self._stages if not stage.empty()]
        for stage in self._stages:
            stage.state = StageState.SENT
        return [stage.freeze() for stage in self._stages]

    def applied(self, batch_ids: Collection[str]) -> None:
        """Drop the stages whose batches are known to be applied."""
        self._stages = [stage for stage in self._stages if stage.batch_id not in batch_ids]

    def failed(self, *, known: bool) -> None:
        """The commit attempt of the ``SENT`` stages failed; ``known``: nothing applied."""
        for stage in self._stages:
            if stage.state is StageState.SENT:
                stage.state = StageState.OPEN if known else StageState.UNKNOWN
        self._merge()

    def unresolved(self) -> list[str]:
        """Ids of the ``UNKNOWN`` stages, to ask the database about."""
        return [stage.batch_id for stage in self._stages if stage.state is StageState.UNKNOWN]

    def resolve(self, applied: Collection[str]) -> None:
        """The database answered: drop applied ``UNKNOWN`` stages, reopen the rest."""
        self.applied(applied)
        for stage in self._stages:
            if stage.state is StageState.UNKNOWN:
                stage.state = StageState.OPEN
        self._merge()

    def discard(self) -> bool:
        """Drop everything staged; ``True`` if a dropped stage may already be applied."""
        doubtful = self.in_doubt()
        self._stages = []
        return doubtful

    def _merge(self) -> None:
        merged: list[Stage] = []
        for stage in self._stages:
            if stage.empty() and stage.state is StageState.OPEN and stage is not self._stages[-1]:
                continue
            previous = merged[-1] if merged else None
            if (
                previous is not None
                and previous.state is StageState.OPEN
                and stage.state is StageState.OPEN
            ):
                previous.absorb(stage)
            else:
                merged.append(stage)
        self._stages = merged
