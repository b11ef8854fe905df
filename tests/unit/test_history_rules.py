"""The history rules (``sessions._model.history``), one test per written rule and pair type.

Pure functions over plain items: no database. The same rules at commit, on every
backend, are in ``tests/contract/test_integrity.py``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sessions._model.history import (
    CALL_OUTPUT,
    RULES,
    check_history,
    first_valid_start,
    pairing_kept,
    shape_of,
    split_pair,
)
from sessions._model.serde import encode_staged
from tests.history_items import assistant, call, output, reasoning, user

ROOT = Path(__file__).resolve().parents[2]


def kinds(items: list[Any], finished: bool = True) -> list[tuple[int, str]]:
    return [(d.index, d.kind) for d in check_history(items, finished=finished)]


PAIRS = sorted(CALL_OUTPUT.items())


@pytest.mark.parametrize(("call_type", "output_type"), PAIRS)
def test_every_pair_type_answered_in_order_keeps_the_rules(
    call_type: str, output_type: str
) -> None:
    assert kinds([user(), call(call_type, "c1"), output(output_type, "c1"), assistant()]) == []


@pytest.mark.parametrize(("call_type", "output_type"), PAIRS)
def test_orphan_output_of_every_pair_type_is_a_defect(call_type: str, output_type: str) -> None:
    assert kinds([user(), output(output_type, "c1"), assistant()]) == [(1, "orphan_output")]
    # the call after its output does not help, nor a call of another type
    other = "function_call" if call_type != "function_call" else "custom_tool_call"
    assert (1, "orphan_output") in kinds([user(), output(output_type, "c1"), call(call_type, "c1")])
    assert (2, "orphan_output") in kinds([user(), call(other, "c1"), output(output_type, "c1")])


def test_local_shell_output_may_name_its_call_by_id() -> None:
    items = [call("local_shell_call", "c1"), {"type": "local_shell_call_output", "id": "c1"}]
    assert kinds(items) == []


@pytest.mark.parametrize("call_type", sorted(set(CALL_OUTPUT) - {"mcp_approval_request"}))
def test_missing_output_is_a_defect_in_a_finished_history(call_type: str) -> None:
    assert kinds([user(), call(call_type, "c1")]) == [(1, "missing_output")]


@pytest.mark.parametrize("call_type", sorted(CALL_OUTPUT))
def test_pending_calls_at_the_end_of_an_unfinished_history_are_not_defects(
    call_type: str,
) -> None:
    items = [
        user(),
        reasoning(),
        call(call_type, "c1"),
        call("function_call", "c2"),
        output("function_call_output", "c2"),
    ]
    assert kinds(items, finished=False) == []


def test_a_call_the_run_went_past_is_missing_its_output_even_when_unfinished() -> None:
    items = [user(), call("function_call", "c1"), assistant(), user("again")]
    assert kinds(items, finished=False) == [(1, "missing_output")]


def test_an_unanswered_mcp_approval_request_is_not_a_defect() -> None:
    assert kinds([user(), call("mcp_approval_request", "r1"), assistant()]) == []


def test_duplicate_call_is_a_defect() -> None:
    items = [call("function_call", "c1"), call("function_call", "c1")]
    items += [output("function_call_output", "c1")]
    assert (1, "duplicate_call") in kinds(items)


def test_duplicate_output_is_a_defect() -> None:
    items = [call("function_call", "c1"), output("function_call_output", "c1")]
    items += [output("function_call_output", "c1")]
    assert kinds(items) == [(2, "duplicate_output")]


def test_duplicate_id_is_a_defect_but_the_sdk_placeholder_id_is_not() -> None:
    assert kinds([assistant(item_id="m1"), assistant(item_id="m1")]) == [(1, "duplicate_id")]
    placeholder = "__fake_id__"
    assert kinds([assistant(item_id=placeholder), assistant(item_id=placeholder)]) == []


def test_reasoning_without_follower_is_a_defect() -> None:
    assert kinds([user(), reasoning(), user("next")]) == [(1, "reasoning_without_follower")]
    assert kinds([user(), reasoning()]) == [(1, "reasoning_without_follower")]
    assert kinds([user(), reasoning()], finished=False) == []  # the rest is on its way
    assert kinds([user(), reasoning(), assistant()]) == []
    assert kinds([user(), reasoning(), reasoning("rs_2"), assistant()]) == []


def test_not_an_object_is_a_defect() -> None:
    assert kinds([user(), "plain text", 3]) == [(1, "not_an_object"), (2, "not_an_object")]


def test_every_rule_has_a_test_here() -> None:
    source = Path(__file__).read_text()
    for name in RULES:
        assert f'"{name}"' in source.replace(f'RULES["{name}"]', ""), name


def test_messages_name_types_and_call_ids_never_item_text() -> None:
    secret = "the user's secret text"
    items = [user(secret), {"type": "function_call_output", "call_id": "c9", "output": secret}]
    (defect,) = check_history(items)
    assert "c9" in defect.message and "function_call_output" in defect.message
    assert secret not in defect.message


def test_first_valid_start_skips_past_the_last_output_whose_call_was_cut_off() -> None:
    window = [
        output("function_call_output", "a"),
        assistant(),
        user(),
        call("function_call", "b"),
        output("function_call_output", "b"),
    ]
    assert first_valid_start(window) == 1
    assert first_valid_start(window[1:]) == 0
    assert first_valid_start([]) == 0
    # cutting past o1 cuts c3 off from o3: the scan goes on past it too
    cut = [
        call("function_call", "c3"),
        output("function_call_output", "c1"),
        output("function_call_output", "c3"),
        assistant(),
    ]
    assert first_valid_start(cut) == 3
    cut = [call("function_call", "c3"), output("function_call_output", "c1")]
    cut += [output("function_call_output", "c2"), output("function_call_output", "c3")]
    assert first_valid_start([*cut[:1], *cut[2:3], *cut[1:2], *cut[3:], assistant()]) == 4


def test_pairing_kept_refuses_removing_an_output_whose_call_stays() -> None:
    assert pairing_kept([output("function_call_output", "a"), assistant()]) is False
    assert pairing_kept([call("function_call", "a"), output("function_call_output", "a")])


@pytest.mark.parametrize(("call_type", "output_type"), sorted(CALL_OUTPUT.items()))
def test_split_pair_finds_a_call_before_a_cut_answered_after_it(
    call_type: str, output_type: str
) -> None:
    before = [user(), call(call_type, "a"), call(call_type, "b")]
    after = [output(output_type, "a"), output(output_type, "b"), assistant()]
    assert split_pair(before, after) == (1, 0, call_type, "a")
    assert split_pair(before[:1], before[1:] + after) is None  # the pairs wholly after
    assert split_pair(before + after, [user()]) is None  # the pairs wholly before


def test_split_pair_ignores_an_output_whose_call_is_nowhere() -> None:
    """An orphan stored already (``integrity="off"``) is not split by the cut."""
    assert split_pair([user()], [output("function_call_output", "x"), assistant()]) is None


def test_docs_history_md_shows_every_rule() -> None:
    text = (ROOT / "docs" / "history.md").read_text()
    for name, description in RULES.items():
        assert f"| `{name}` | {description} |" in text, name


def test_scripted_answers_sharing_the_agents_testing_default_id_are_not_duplicates() -> None:
    answer = {
        "type": "message",
        "role": "assistant",
        "id": "scripted-message",
        "content": [{"type": "output_text", "text": "hi"}],
    }
    assert check_history([answer, dict(answer)]) == []
    other = {**answer, "id": "msg_1"}
    assert [d.kind for d in check_history([other, dict(other)])] == ["duplicate_id"]


class _EqualToAll(str):
    """A ``str`` subclass whose comparisons differ from its JSON text's."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


class _IntEqualToAll(int):
    """An ``int`` subclass equal to everything (JSON stores a plain number)."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = int.__hash__


_VALUES = st.one_of(
    st.sampled_from(sorted(CALL_OUTPUT) + sorted(CALL_OUTPUT.values()) + ["message", "reasoning"]),
    st.sampled_from(["user", "assistant", "system", "c1", "c2", "", "__fake_id__"]),
    st.sampled_from([None, 0, 1, True, 1.5, [], ["c1"], ("c1",), {}, {"c1": 1}]),
    st.builds(_EqualToAll, st.sampled_from(["c1", "user", "function_call"])),
    st.builds(_IntEqualToAll, st.integers(0, 2)),
)
_ITEMS = st.dictionaries(
    st.sampled_from(["type", "role", "id", "call_id", "approval_request_id", "content"]),
    _VALUES,
)


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_ITEMS, max_size=8), finished=st.booleans())
@example(items=[{"type": "reasoning"}, {"role": _IntEqualToAll(0)}], finished=False)
@example(items=[{"type": "reasoning"}, {"role": _EqualToAll("user")}], finished=False)
# A non-string call_id is not a missing one: no falling back to the item's id.
@example(items=[{"type": "local_shell_call_output", "id": "c1", "call_id": 0}], finished=False)
def test_the_rules_judge_a_staged_items_shape_exactly_as_its_stored_json(
    items: list[dict[str, Any]], finished: bool
) -> None:
    """What commit judges (each item's shape, taken before encoding, or its decoded
    text where there is none) gets the same verdict as the JSON the store keeps."""
    texts, shapes = encode_staged(items)
    stored = [json.loads(text) for text in texts]
    judged = [stored[i] if shape is None else shape for i, shape in enumerate(shapes)]
    assert check_history(judged, finished=finished) == check_history(stored, finished=finished)
    for item, shape in zip(items, shapes, strict=True):
        odd = any(isinstance(v, _EqualToAll) for k, v in item.items() if k != "content")
        assert (shape is None) == odd  # a subclass's value in a field the rules read


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_ITEMS, max_size=8))
@example(items=[{"type": "message", "role": None, "id": 0, "call_id": 1.5, "content": []}])
@example(items=[{"call_id": 2**70, "role": "user"}])  # orjson refuses, json writes it
def test_a_staged_items_shape_is_shape_of_the_item_whichever_path_encoded_it(
    items: list[dict[str, Any]],
) -> None:
    """``encode_staged`` takes a plain item's shape in the same walk that checks it is
    plain; every shape it gives is what ``shape_of`` gives for the item."""
    _, shapes = encode_staged(items)
    assert shapes == [shape_of(item) for item in items]


def test_split_pair_ignores_an_output_repeating_one_given_before_the_cut() -> None:
    """The call's pair is whole before the cut: an output repeated after it (stored with
    ``integrity="off"``) splits nothing, so either side of a cut may be read first."""
    before = [user(), call("function_call", "a"), output("function_call_output", "a")]
    after = [output("function_call_output", "a"), assistant()]
    assert split_pair(before, after) is None
    assert split_pair(before[:2], before[2:] + after) == (1, 0, "function_call", "a")
