"""The rules a history must keep for the Responses API to take it back. Pure: no I/O.

The API refuses (HTTP 400) an input in which a tool call's output has no matching call
earlier in the input, a call has no output, or a reasoning item lacks the item it was
emitted with. One such item stored in a session makes every later turn fail. These
rules are checked at commit (``integrity=``, see :mod:`sessions._engine.session`), by limited
reads (:func:`first_valid_start`), by compaction (:func:`pairing_kept`), by rewinds
and forks at a turn (:func:`split_pair`) and by ``sessions doctor``. ``docs/history.md`` renders :data:`RULES`.

Items are the SDK's input items as stored (plain dicts). Pairs are matched by type and
call id: the call's ``call_id`` (an MCP approval request's ``id``) against the output's
``call_id`` (a local shell output's ``call_id``, else its ``id``; an MCP approval
response's ``approval_request_id``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "CALL_OUTPUT",
    "RULES",
    "SHAPE_FIELDS",
    "Defect",
    "Shape",
    "answered_calls",
    "calls_from",
    "check_history",
    "first_valid_start",
    "item_label",
    "offenders",
    "open_calls",
    "pairing_kept",
    "shape_of",
    "split_pair",
]

#: Each call type and the type of the output that answers it.
CALL_OUTPUT: dict[str, str] = {
    "function_call": "function_call_output",
    "custom_tool_call": "custom_tool_call_output",
    "computer_call": "computer_call_output",
    "shell_call": "shell_call_output",
    "local_shell_call": "local_shell_call_output",
    "apply_patch_call": "apply_patch_call_output",
    "mcp_approval_request": "mcp_approval_response",
}
_OUTPUT_CALL = {output: call for call, output in CALL_OUTPUT.items()}

#: Calls that need no answer for the API to take the history: an MCP approval request
#: may stay unanswered (the user declined to decide; the SDK asks again).
_ANSWER_OPTIONAL = frozenset({"mcp_approval_request"})

#: Item ids that are not ids: the SDK's placeholder for items of models without ids,
#: and the default id of ``agents.testing.assistant_message`` (every scripted answer
#: has it: a test's conversation must not lose its answers to the duplicate-id rule).
_PLACEHOLDER_IDS = frozenset({"__fake_id__", "scripted-message"})

#: Types whose ``id`` names another item rather than the item itself.
_ID_IS_REFERENCE = frozenset({"local_shell_call_output", "item_reference"})
#: Ids the duplicate-id rule skips: the placeholders and the empty string.
_NOT_IDS = _PLACEHOLDER_IDS | {""}

#: ``name -> description``: every rule checked, as ``docs/history.md`` shows it.
RULES: dict[str, str] = {
    "orphan_output": (
        "A tool output (`function_call_output`, `custom_tool_call_output`, "
        "`computer_call_output`, `shell_call_output`, `local_shell_call_output`, "
        "`apply_patch_call_output`) or an `mcp_approval_response` must come after a call "
        "of the matching type with the same call id (an approval response: the request's "
        "`id`)."
    ),
    "missing_output": (
        "A call (`function_call`, `custom_tool_call`, `computer_call`, `shell_call`, "
        "`local_shell_call`, `apply_patch_call`) must have its output later in the "
        "history, unless the turn is unfinished and the call is pending: nothing but "
        "calls, outputs and reasoning follows it (a run cancelled or waiting for an "
        "approval; the SDK resumes it). An `mcp_approval_request` may stay unanswered."
    ),
    "duplicate_call": "Two calls of one type must not share a call id.",
    "duplicate_output": "A call must not be answered twice.",
    "duplicate_id": (
        "Two items must not share an `id` (the API refuses duplicate item ids). Not ids: "
        "the SDK's placeholder `__fake_id__` and `scripted-message`, the default id of "
        "`agents.testing.assistant_message`."
    ),
    "reasoning_without_follower": (
        "A `reasoning` item must be followed by an item the model emitted with it (a "
        "call, an assistant message, another reasoning item), not by a user, system or "
        "developer message or a tool output, and must not end a finished history."
    ),
    "not_an_object": "Every item must be a JSON object.",
}


@dataclass(frozen=True, slots=True)
class Defect:
    """One broken rule at one item of a checked sequence."""

    index: int
    """Position of the offending item in the checked sequence."""
    kind: str
    """The rule's name, a key of :data:`RULES`."""
    call_id: str | None
    """The call id concerned (``None`` when the rule is not about a pair)."""
    message: str
    """Names the item's type and call id; never shows the item's text."""


#: What the rules read of a staged item (:func:`shape_of`; ``None``: decode its text).
Shape = dict[str, Any] | None

#: The only fields of an item the rules read.
_FIELDS = ("type", "role", "id", "call_id", "approval_request_id")
#: The same, as a set (what :func:`sessions._model.serde.encode_staged` looks keys up in).
SHAPE_FIELDS = frozenset(_FIELDS)


def shape_of(item: dict[str, Any]) -> Shape:
    """What the rules read of a staged item (a ``dict`` with string keys), taken
    before it is encoded: a small dict the rules judge exactly as the stored item.

    The rules compare these fields to strings, test whether ``role`` is present and
    whether a field is null, nothing else: a ``str`` and ``None`` are kept, any other
    value becomes ``0`` (neither a string nor null, before and after JSON; the caller's
    objects are not held). ``None`` for the whole
    item when a field holds an instance of a ``str`` subclass, whose comparisons may
    differ from the plain string JSON stores: its text is decoded then.
    """
    shape: dict[str, Any] = {}
    for name in _FIELDS:
        if name in item:
            value = item[name]
            if type(value) is str:
                shape[name] = value
            elif isinstance(value, str):
                return None
            else:
                shape[name] = None if value is None else 0
    return shape


def item_label(item: Any) -> str:
    """A short, text-free name of an item: its type (or role), never its content."""
    if not isinstance(item, dict):
        return type(item).__name__
    kind = item.get("type")
    if isinstance(kind, str):
        return kind
    role = item.get("role")
    return f"{role} message" if isinstance(role, str) else "item without a type"


def _type(item: Any) -> str | None:
    kind = item.get("type")
    if isinstance(kind, str):
        return kind
    return "message" if "role" in item else None


def _call_key(kind: str, item: dict[str, Any]) -> str | None:
    key = item.get("id") if kind == "mcp_approval_request" else item.get("call_id")
    return key if isinstance(key, str) else None


def _output_key(kind: str, item: dict[str, Any]) -> str | None:
    if kind == "mcp_approval_response":
        key = item.get("approval_request_id")
    else:
        key = item.get("call_id")
        if key is None and kind == "local_shell_call_output":
            key = item.get("id")
    return key if isinstance(key, str) else None


def _follows_reasoning(kind: str | None, item: dict[str, Any]) -> bool:
    """Whether this item may follow a reasoning item (emitted by the model with it)."""
    if kind in _OUTPUT_CALL:
        return False
    if kind == "message" or (kind is None and "role" in item):
        return item.get("role") == "assistant"
    return True


def _reasoning_defect(after: Any, finished: bool) -> str | None:
    """What is wrong with a reasoning item followed by ``after`` (``None``: it ends the
    sequence), or ``None``."""
    if after is None:
        return "a reasoning item ends the history" if finished else None
    if isinstance(after, dict) and not _follows_reasoning(_type(after), after):
        return f"a reasoning item is followed by a {item_label(after)}"
    return None


def _missing_outputs(
    calls: dict[tuple[str, str], int], answered: set[tuple[str, str]], last_move: int | None
) -> list[Defect]:
    """The calls without their output, but those after ``last_move`` (pending: the SDK
    resumes them; ``None`` in a finished history, where none is)."""
    return [
        Defect(index, "missing_output", key, f"{kind} {key!r} has no {CALL_OUTPUT[kind]}")
        for (kind, key), index in calls.items()
        if (kind, key) not in answered
        and kind not in _ANSWER_OPTIONAL
        and (last_move is None or index <= last_move)
    ]


def check_history(items: Sequence[Any], *, finished: bool = True) -> list[Defect]:
    """Every broken rule in ``items`` (oldest first), ordered by position.

    ``finished=False``: the sequence may end mid-run (cancelled, awaiting an approval):
    calls with nothing but calls, outputs and reasoning after them are pending, not
    missing their outputs, and a trailing reasoning item is allowed.

    One pass (commit runs it on every write: kept to plain loops and dict lookups).
    """
    defects: list[Defect] = []
    add = defects.append
    calls: dict[tuple[str, str], int] = {}  # (call type, key) -> index
    answered: set[tuple[str, str]] = set()
    ids: set[str] = set()
    last_move = -1  # index of the last item past which pending calls are late
    count = len(items)
    for index, item in enumerate(items):
        if type(item) is not dict:
            wrong = f"the item is a {item_label(item)}, not an object"
            add(Defect(index, "not_an_object", None, wrong))
            continue
        get = item.get
        kind = get("type")
        if not isinstance(kind, str):
            kind = "message" if "role" in item else None
        item_id = get("id")
        if isinstance(item_id, str) and item_id not in _NOT_IDS and kind not in _ID_IS_REFERENCE:
            if item_id in ids:
                add(Defect(index, "duplicate_id", None, f"{kind} item repeats an item id"))
            ids.add(item_id)
        if kind in CALL_OUTPUT:
            key = item_id if kind == "mcp_approval_request" else get("call_id")  # _call_key
            if not isinstance(key, str):
                continue  # nothing can answer it; the API reports its own schema errors
            if (kind, key) in calls:
                add(Defect(index, "duplicate_call", key, f"{kind} {key!r} appears twice"))
            else:
                calls[(kind, key)] = index
        elif kind in _OUTPUT_CALL:
            key = get("call_id") if kind == "function_call_output" else _output_key(kind, item)
            if not isinstance(key, str):
                key = None
            call = _OUTPUT_CALL[kind]
            if key is None or (call, key) not in calls:
                add(Defect(index, "orphan_output", key, f"{kind} {key!r} has no {call} before it"))
            elif (call, key) in answered:
                add(Defect(index, "duplicate_output", key, f"{kind} {key!r} answers it again"))
            else:
                answered.add((call, key))
        elif kind == "reasoning":
            fault = _reasoning_defect(items[index + 1] if index + 1 < count else None, finished)
            if fault is not None:
                add(Defect(index, "reasoning_without_follower", None, fault))
        else:  # a message or anything else: the run went past pending calls
            last_move = index
    if len(answered) < len(calls):  # else every call has its output
        defects += _missing_outputs(calls, answered, None if finished else last_move)
    if len(defects) > 1:
        defects.sort(key=lambda defect: defect.index)
    return defects


def offenders(defects: Iterable[Defect]) -> set[int]:
    """Positions of the items to take out so the rest keeps fewer broken rules."""
    return {defect.index for defect in defects}


def first_valid_start(items: Sequence[Any]) -> int:
    """Where a window of the latest items may start: past every output whose call it
    cut off.

    A read limited to the latest N items may cut a call from its output (the call fell
    before the window). Starting after the last such output drops the cut exchange;
    outputs after it whose calls fell before the new start are cut off in turn, so the
    scan repeats until none is left. The window from there serves no orphan output.
    """
    start = 0
    while True:
        cut = _last_orphan(items, start)
        if cut is None:
            return start
        start = cut + 1


def _pairing(
    items: Sequence[Any], start: int = 0
) -> Iterator[tuple[int, bool, tuple[str, str] | None]]:
    """``(index, is_call, (call type, call id))`` for each call and output in
    ``items[start:]``; the key is ``None`` when the item names no call id."""
    for index in range(start, len(items)):
        item = items[index]
        if not isinstance(item, dict):
            continue
        kind = _type(item)
        if kind in CALL_OUTPUT:
            key = _call_key(kind, item)
            yield index, True, None if key is None else (kind, key)
        elif kind in _OUTPUT_CALL:
            key = _output_key(kind, item)
            yield index, False, None if key is None else (_OUTPUT_CALL[kind], key)


def _last_orphan(items: Sequence[Any], start: int) -> int | None:
    """Position of the last output in ``items[start:]`` whose call is not before it there."""
    last: int | None = None
    calls: set[tuple[str, str]] = set()
    for index, is_call, key in _pairing(items, start):
        if is_call:
            if key is not None:
                calls.add(key)
        elif key is None or key not in calls:
            last = index
    return last


def calls_from(items: Sequence[Any], wanted: Iterable[tuple[str, str]]) -> int | None:
    """Where the shortest end of ``items`` that holds every call in ``wanted``
    (``(call type, call id)``) starts; ``None`` if ``items`` lack one of them."""
    missing = set(wanted)
    for index in range(len(items) - 1, -1, -1):
        item = items[index]
        if type(item) is not dict:
            continue
        kind = _type(item)
        if kind in CALL_OUTPUT:
            missing.discard((kind, _call_key(kind, item)))
            if not missing:
                return index
    return None


def answered_calls(items: Sequence[Any]) -> set[tuple[str, str]]:
    """``(call type, call id)`` of the calls that outputs in ``items`` answer and that
    ``items`` do not hold before them: what must be found earlier in the history."""
    seen: set[tuple[str, str]] = set()
    wanted: set[tuple[str, str]] = set()
    for _, is_call, key in _pairing(items):
        if key is None:
            continue
        if is_call:
            seen.add(key)
        elif key not in seen:
            wanted.add(key)
    return wanted


def pairing_kept(removed: list[Any]) -> bool:
    """Whether removing ``removed`` (an end of the history) splits no call from its
    output: no output in it answers a call outside it (what
    :data:`sessions._engine.compaction.PAIRING_CHECK` asks)."""
    return first_valid_start(removed) == 0


def open_calls(items: Sequence[Any]) -> set[tuple[str, str]]:
    """``(call type, call id)`` of the calls in ``items`` that no output after them in
    ``items`` answers: the calls a cut right after ``items`` may split from an output
    (:func:`split_pair` then finds one only among these, unless what follows repeats
    an output ``items`` already hold)."""
    open_: dict[tuple[str, str], None] = {}
    for _, is_call, key in _pairing(items):
        if key is None:
            continue
        if is_call:
            open_[key] = None
        else:
            open_.pop(key, None)
    return set(open_)


def split_pair(before: Sequence[Any], after: Sequence[Any]) -> tuple[int, int, str, str] | None:
    """The first tool pair a cut of a history into ``before`` and ``after`` splits:
    ``(index of the call in before, index of its output in after, call type, call id)``;
    ``None`` when the cut splits none.

    The outputs concerned are those :func:`answered_calls` finds in ``after``, an output
    whose call is not before it there (what :func:`first_valid_start` trims off a window
    starting there), whose call ``before`` holds and leaves open (:func:`open_calls`:
    no output of its own before the cut). An output whose call is nowhere (stored with
    ``integrity="off"``), or that repeats the output of a call answered before the cut,
    is not split by the cut: the call's pair is whole.
    """
    wanted = answered_calls(after)
    if wanted:
        wanted &= open_calls(before)
    if not wanted:
        return None
    for index, is_call, key in _pairing(before):
        if is_call and key is not None and key in wanted:
            output = next(i for i, is_c, k in _pairing(after) if not is_c and k == key)
            return index, output, key[0], key[1]
    return None
