"""Replacing the end of a history: what the SDK's compaction asks of a session.

``OpenAIResponsesCompactionSession`` (openai-agents 0.23+) asks the session it wraps for
a snapshot of the latest items (:func:`read_window`) and later replaces the end of that
snapshot with the compacted output, provided it is still the end of the history and
unchanged (:func:`plan_replacement`). The session applies the plan: in one commit of its
own in autocommit mode, or staged with the open transaction otherwise (see
:class:`sessions.BufferedSession`).

The items a window shows are identified so that "unchanged" can be checked exactly:
a stored item by its row key (rows are never modified, only added and removed), a
staged item by its position among the staged items and its text. The database checks
the stored part again inside the committing transaction (the batch's ``pops`` must
exist and nothing may have been stored after ``tail``), so another writer on the same
session between the snapshot and the commit makes the replacement fail whole.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .._model.backend import Backend
from .._model.history import pairing_kept
from .._model.serde import decode_item
from .._model.staging import Staging
from .observe import observed_load

__all__ = ["PAIRING_CHECK", "Ident", "Plan", "Window", "plan_replacement", "read_window"]

#: The tool-call pairing rule of replacements: ``check(removed)`` gets the items a
#: replacement would remove from the end of the history; ``False`` (an output among them
#: answers a call that would stay: the pair would be split) refuses the replacement.
#: :func:`sessions._model.history.pairing_kept`, the rules of ``docs/history.md``. The SDK
#: itself never asks to replace an end of history that would split a tool call from its
#: output (``tests/sdk_flows/test_sdk_compaction.py`` checks that it does not); this keeps a
#: caller of the hooks from doing it.
PAIRING_CHECK: Callable[[list[Any]], bool] | None = pairing_kept

#: ``(0, row_key, "")`` for a stored item, ``(1, position, text)`` for a staged one.
Ident = tuple[int, int, str]


@dataclass(frozen=True)
class Window:
    """The latest items of a session's history (stored, then staged), identified."""

    idents: list[Ident]
    items: list[Any]
    complete: bool
    """``True`` when the window holds the whole history."""


@dataclass(frozen=True)
class Plan:
    """How to replace the end of the history (see :meth:`Staging.replace_tail`)."""

    keep: int
    """How many staged items stay (those before the replaced part)."""
    pops: list[int]
    """Stored rows to remove: the stored part of the replaced end, and a pruned prefix."""
    tail: int | None
    """The newest stored row when planned: nothing may be stored after it at commit."""


def _decode_object(text: str) -> Any:
    """The stored item, or ``None`` when it is not a readable JSON object."""
    try:
        item = decode_item(text)
    except ValueError:
        return None
    return item if isinstance(item, dict) else None


async def read_window(
    backend: Backend, session_id: str, staging: Staging, count: int
) -> Window | None:
    """The latest ``count`` items; ``None`` if a stored one among them is unreadable."""
    clear, popped, staged = staging.view()
    staged_ids: list[Ident] = [(1, i, text) for i, text in enumerate(staged)]
    if len(staged) > count:
        chosen = staged_ids[len(staged) - count :]
        return Window(chosen, [decode_item(text) for _, _, text in chosen], False)
    need = count - len(staged)
    visible: list[tuple[int, str]] = []
    more = False
    if not clear:
        fetch = need + len(popped) + 1
        rows = await observed_load(backend, session_id, fetch)
        visible = [(key, text) for key, text in rows if key not in popped]
        more = len(visible) > need
        visible = visible[max(0, len(visible) - need) :] if need else []
    items: list[Any] = []
    for _, text in visible:
        item = _decode_object(text)
        if item is None:
            return None  # an unreadable row would end up inside the replaced part
        items.append(item)
    idents: list[Ident] = [(0, key, "") for key, _ in visible] + staged_ids
    items.extend(decode_item(text) for text in staged)
    return Window(idents, items, not more)


async def _prunable(
    backend: Backend,
    session_id: str,
    popped: set[int],
    before: int | None,
    prune: Callable[[Any], bool],
) -> list[int]:
    """Keys of the oldest stored items, up to ``before``, for which ``prune`` holds."""
    keys: list[int] = []
    for key, text in await observed_load(backend, session_id, None):
        if key in popped:
            continue
        if before is not None and key >= before:
            break
        item = _decode_object(text)
        if item is None or not prune(item):
            break
        keys.append(key)
    return keys


async def plan_replacement(
    backend: Backend,
    session_id: str,
    staging: Staging,
    expected: list[Ident],
    prune: Callable[[Any], bool] | None,
) -> Plan | None:
    """How to replace the items ``expected``, if they are still exactly the end of the
    history (else ``None``). ``prune`` also removes the oldest stored items it accepts
    (the SDK's ``prune_prefix``: encrypted items past their time to live)."""
    if not expected:
        return None
    window = await read_window(backend, session_id, staging, len(expected))
    if window is None or window.idents != expected:
        return None
    if PAIRING_CHECK is not None and not PAIRING_CHECK(window.items):
        return None
    clear, popped, staged = staging.view()
    pops = [key for kind, key, _ in expected if kind == 0]
    keep = len(staged) - sum(1 for kind, _, _ in expected if kind == 1)
    tail = max(pops) if pops else None
    if prune is not None and not clear:
        before = pops[0] if pops else None
        pops = await _prunable(backend, session_id, popped, before, prune) + pops
    return Plan(keep, pops, tail)
