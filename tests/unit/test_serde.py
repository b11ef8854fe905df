"""Staged items are encoded by orjson where it writes the value ``json`` would, and by
``json`` (:func:`sessions._model.serde.encode_item`) everywhere else: the two paths must accept,
refuse and store exactly the same items."""

from __future__ import annotations

import enum
import json
import math
import uuid
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from sessions._model.serde import _encode_fast, encode_item, encode_staged
from sessions.errors import InvalidItemError


class Colour(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


class Text(str):
    pass


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # beyond 64 bits too: orjson refuses those, json writes them
    st.floats(),  # NaN and infinities included: refused by both paths
    st.text(),  # lone surrogates included: refused by both paths
    st.sampled_from([Colour.RED, Level.HIGH, Text("sub"), uuid.UUID(int=7), (1, 2), b"x"]),
)
_values = st.recursive(
    _leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(), st.integers(), st.none()), inner, max_size=4),
    ),
    max_leaves=20,
)


def _stdlib(item: Any) -> str | InvalidItemError:
    try:
        return encode_item(item, 0)
    except InvalidItemError as exc:
        return exc


@settings(max_examples=400, deadline=None)
@given(st.dictionaries(st.text(), _values, max_size=5))
@example({"x": float("nan")})
@example({"x": [1.5, {"y": float("-inf")}]})
@example({"x": 2**64})
@example({"x": "\ud800"})
@example({"x": Colour.RED})
@example({"x": uuid.UUID(int=7)})
@example({"x": {1: "int key"}})
@example({"x": Level.HIGH, "t": Text("sub"), "p": (1, 2)})
def test_a_staged_item_is_stored_as_the_value_json_writes_or_refused_with_json_error(
    item: dict[str, Any],
) -> None:
    expected = _stdlib(item)
    try:
        (text,), _ = encode_staged([item])
    except InvalidItemError as exc:
        assert isinstance(expected, InvalidItemError), f"refused only by the fast path: {exc}"
        assert str(exc) == str(expected)
        return
    assert isinstance(expected, str), f"accepted only by the fast path: {text}"
    assert json.loads(text) == json.loads(expected)


@pytest.mark.parametrize(
    "value",
    [float("nan"), math.inf, Colour.RED, uuid.UUID(int=7), Level.HIGH, Text("s"), (1,), 2**70],
    ids=["nan", "inf", "enum", "uuid", "int-enum", "str-subclass", "tuple", "int-beyond-64-bits"],
)
def test_the_fast_path_leaves_every_value_orjson_would_write_differently_to_json(
    value: Any,
) -> None:
    assert _encode_fast({"x": value}) is None
    assert _encode_fast({"x": [{"y": value}]}) is None


def test_the_fast_path_leaves_non_string_keys_and_deep_nesting_to_json() -> None:
    assert _encode_fast({"x": {1: "a"}}) is None
    deep: Any = "leaf"
    for _ in range(300):  # past orjson's own limit, within ours
        deep = [deep]
    assert _encode_fast({"x": deep}) is None
    (text,), _ = encode_staged([{"x": deep}])
    assert json.loads(text) == {"x": deep}


def test_the_fast_path_writes_plain_items() -> None:
    item = {"role": "user", "content": [{"text": 'é \n "q"', "n": 1, "f": 0.1, "b": None}]}
    text = _encode_fast(item)
    assert text is not None and json.loads(text) == item
