"""What the rules draw: batches of items, catalogue changes, run ids, usages (mostly
valid, a few invalid ones that must be refused with nothing staged: D7)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from hypothesis import strategies as st

#: A TTL that has always expired by the time purge() runs.
TINY = timedelta(microseconds=1)
LONG = timedelta(days=1)

UNITS = st.lists(st.sampled_from(["user", "assistant", "pair"]), min_size=1, max_size=3).flatmap(
    lambda units: st.sampled_from([units, [*units, "open"]])
)

#: A turn number: below 1 counts from the end; "cut": where a tool call is parted from
#: its output (when there is such a place).
AT = st.one_of(st.none(), st.integers(-3, 5), st.just("cut"))

RUN_IDS = st.sampled_from([None, "r1", "r2", "x" * 256, "", "x" * 257, "bad\ud800", 7])


def text_ok(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return "\x00" not in text


USAGES = st.one_of(
    st.tuples(*[st.integers(0, 100)] * 5),
    st.just((1, 2**63, 0, 0, 0)),
    st.just((-1, 0, 0, 0, 0)),
)

_VALID_FIELDS: dict[str, Any] = {
    "user_id": st.sampled_from(["u0", "u1", None]),
    "title": st.sampled_from(["Trip", "Bill", None]),
    "tags": st.sampled_from([{"a"}, {"a", "b"}, None]),
    "metadata": st.sampled_from([{"k": 1}, {"k": [1, "x"]}, None]),
    "ttl": st.sampled_from([TINY, LONG, None]),
}

#: D7: metadata keys are strings; a TTL has a maximum.
D7_INFO: list[dict[str, Any]] = [{"metadata": {1: "int key"}}, {"ttl": timedelta.max}]
_INVALID: list[dict[str, Any]] = [
    *D7_INFO,
    {"ttl": timedelta(0)},
    {"user_id": ""},
    {"tags": {f"t{i}" for i in range(33)}},
    {"title": "nul\x00"},
]

INFO_CHANGES = st.one_of(
    st.fixed_dictionaries({}, optional=_VALID_FIELDS)
    .filter(bool)
    .map(lambda fields: (fields, True)),
    st.sampled_from(_INVALID).map(lambda fields: (fields, False)),
)
