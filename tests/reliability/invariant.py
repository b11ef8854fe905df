"""The one invariant every reliability scenario checks.

Test items carry a tag ``[writer, batch, index, size]``. A stored history is correct
when it is a sequence of WHOLE batches (``index`` 0..size-1, contiguous), each
writer's batches appear in the order they were committed (batch numbers strictly
increase: nothing duplicated or reordered), every batch whose commit returned is
present (nothing lost) and no batch appears that was never committed (no phantom).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

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


def check_history(items: Sequence[Any], ledger: Ledger, *, exact: bool = True) -> list[str]:
    """Every violation of the invariant in ``items`` (empty when the history is right).

    ``exact``: batches that are neither confirmed nor uncertain are phantoms.
    """
    runs, problems = parse_batches(items)
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
