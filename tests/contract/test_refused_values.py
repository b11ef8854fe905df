"""Bad values are refused where they enter, once for every backend (issue 28: findings 2,
7, 8, 9), and values stored before those checks existed break no read of the store.

Every refusal names what was wrong and stages nothing, so the next commit still works.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sessions import Store, TurnUsage
from sessions._tools.transfer import ImportFileError, import_sessions
from tests.conftest import Target
from tests.helpers import age, commit_one, msg

# The documented limits (docs/catalogue.md), written out: a change to one fails here.
MAX_TTL = MAX_DURATION = timedelta(days=36525)  # 100 years
MAX_INT64 = 2**63 - 1
MAX_METADATA_DEPTH = 32


def nested(depth: int) -> dict[str, Any]:
    """A JSON object ``depth`` levels deep (``{"a": {"a": ... {}}}``), built without
    recursion."""
    top: dict[str, Any] = {}
    here = top
    for _ in range(depth - 1):
        here["a"] = {}
        here = here["a"]
    return top


async def _still_commits(store: Store[Any], session_id: str) -> None:
    """After a refusal: nothing was staged, and the session commits as usual."""
    session = store.session(session_id)
    assert not session.has_pending
    await session.add_items([msg("after")])
    await session.commit()
    assert await session.get_items() == [msg("after")]


async def _staging(store: Store[Any], session_id: str, text: str) -> Any:
    """A session of ``session_id`` with ``msg(text)`` staged."""
    session = store.session(session_id)
    await session.add_items([msg(text)])
    return session


# ------------------------------------------------------------------ finding 2: the TTL


def test_the_package_limits_are_the_documented_ones() -> None:
    from sessions._model.catalogue import MAX_METADATA_DEPTH as depth
    from sessions._model.catalogue import MAX_TTL as ttl
    from sessions._model.validate import MAX_DURATION as duration
    from sessions._model.validate import MAX_INT64 as int64

    assert (ttl, duration, int64, depth) == (MAX_TTL, MAX_DURATION, MAX_INT64, MAX_METADATA_DEPTH)


async def test_a_ttl_over_100_years_is_refused_naming_ttl_in_set_info_and_store_options(
    target: Target, sid: str
) -> None:
    store = await target.open()
    session = store.session(sid)
    for too_long in (timedelta(days=999999999), MAX_TTL + timedelta(seconds=1)):
        with pytest.raises(ValueError, match=r"ttl must be at most 36525 days \(100 years"):
            session.set_info(ttl=too_long)
        assert not session.has_pending
    with pytest.raises(ValueError, match="ttl must be at most 36525 days"):
        await target.open(ttl=timedelta(days=999999999))
    await _still_commits(store, sid)

    # 100 years itself is accepted, and listing and purging work around it.
    await commit_one(store, f"{sid}-max", ttl=MAX_TTL)
    info = await store.session_info(f"{sid}-max")
    assert info is not None and info.ttl == MAX_TTL
    assert info.expires_at() == info.updated_at + MAX_TTL
    assert f"{sid}-max" in {i.session_id async for i in store.iter_sessions()}
    assert f"{sid}-max" not in {i.session_id for i in await store.purge(dry_run=True)}
    long_default = await target.open(ttl=MAX_TTL)
    assert f"{sid}-max" not in {i.session_id for i in await long_default.purge(dry_run=True)}


async def test_a_ttl_stored_past_100_years_by_an_older_version_breaks_no_listing_or_purge(
    target: Target, sid: str
) -> None:
    """b92b180 stored ``timedelta(days=999999999)``; a value past Python's timedelta can
    only come from outside (by hand). Either counts as 100 years, the longest TTL."""
    store = await target.open()
    huge, beyond, expired = f"{sid}-huge", f"{sid}-beyond", f"{sid}-expired"
    for session_id in (huge, beyond, expired):
        await commit_one(store, session_id)
    for session_id, seconds in ((huge, 86_400.0 * 999_999_999), (beyond, 1e300), (expired, 60.0)):
        await _set_ttl(target, session_id, seconds)
    await age(target, expired, 3600)

    listed = {i.session_id: i async for i in store.iter_sessions()}
    for session_id in (huge, beyond):
        info = listed[session_id]
        assert info.ttl == MAX_TTL
        assert info.expires_at() == info.updated_at + MAX_TTL
        assert (await store.session_info(session_id)) == info
    assert [i.session_id for i in await store.purge(dry_run=True) if sid in i.session_id] == [
        expired
    ]
    gone = await store.purge()
    assert [i.session_id for i in gone if sid in i.session_id] == [expired]
    assert await store.session_info(huge) is not None
    assert await store.session_info(beyond) is not None


async def _set_ttl(target: Target, session_id: str, seconds: float) -> None:
    await target.execute(
        f"UPDATE txs_sessions SET ttl = {target.param(1)} WHERE session_id = {target.param(2)}",
        seconds,
        session_id,
    )


async def test_an_import_with_a_ttl_over_100_years_fails_naming_the_line_and_writes_nothing(
    store: Store[Any], sid: str, tmp_path: Path
) -> None:
    lines = [
        {"type": "header", "format": "txsessions-export", "version": 1},
        {"type": "session", "session": sid, "ttl_seconds": 1e13},
        {"type": "item", "session": sid, "item": msg("x")},
        {"type": "end", "session": sid, "items": 1},
    ]
    path = tmp_path / "export.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(ImportFileError, match="line 2: .*ttl_seconds must be at most 36525 days"):
        await import_sessions(store, str(path))
    assert await store.session_info(sid) is None


# ------------------------------------------------- finding 9: durations in the Python API


async def test_purge_and_prune_refuse_an_older_than_over_100_years_with_a_value_error(
    store: Store[Any],
) -> None:
    for call in (store.purge, store.prune_batch_records):
        with pytest.raises(ValueError, match=r"older_than must be at most 36525 days"):
            await call(timedelta(days=999999999))
        with pytest.raises(ValueError, match="older_than must be at most"):
            await call(MAX_DURATION + timedelta(days=1))
    assert isinstance(await store.purge(MAX_DURATION, dry_run=True), list)
    assert await store.prune_batch_records(MAX_DURATION) == 0


async def test_limits_past_64_bits_are_refused_naming_them_instead_of_overflowing(
    store: Store[Any], sid: str
) -> None:
    await commit_one(store, sid)
    session = store.session(sid)
    with pytest.raises(ValueError, match=r"limit must be at most 9223372036854775807"):
        await session.get_items(limit=2**70)
    with pytest.raises(ValueError, match="limit must be at most"):
        await store.list_sessions(limit=2**63)
    with pytest.raises(ValueError, match="page_size must be at most"):
        await store.purge(dry_run=True, page_size=2**63)
    assert await session.get_items(limit=MAX_INT64) == [msg(sid)]
    assert sid in {i.session_id for i in await store.list_sessions(limit=MAX_INT64)}


# --------------------------------------------- finding 7: text and usage at staging time


@pytest.mark.parametrize("bad", ["r\ud800", "\udfff", "r\x00un"])
async def test_set_run_id_refuses_a_lone_surrogate_or_nul_so_later_commits_still_work(
    store: Store[Any], sid: str, bad: str
) -> None:
    session = await _staging(store, sid, "before")
    with pytest.raises(ValueError, match="run_id"):
        session.set_run_id(bad)
    assert session.run_id is None
    await session.add_items([msg("after")])
    await session.commit()
    assert await session.get_items() == [msg("before"), msg("after")]
    assert [turn.run_id for turn in await session.turns()] == [None]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"title": "t\ud800"}, "title is not valid Unicode"),
        ({"user_id": "\udc00u"}, "user_id is not valid Unicode"),
        ({"tags": ["ok", "t\ud800"]}, "each tag is not valid Unicode"),
        ({"metadata": {"k": "v\ud800"}}, r"metadata\['k'\] is not valid Unicode"),
        ({"metadata": {"k\ud800": 1}}, "a key of metadata is not valid Unicode"),
        ({"metadata": {"k": ["v\x00"]}}, r"metadata\['k'\]\[0\] must not contain NUL"),
    ],
)
async def test_every_catalogue_text_refuses_lone_surrogates_and_nul_naming_the_field(
    store: Store[Any], sid: str, fields: dict[str, Any], words: str
) -> None:
    session = store.session(sid)
    with pytest.raises(ValueError, match=words):
        session.set_info(**fields)
    await _still_commits(store, sid)


async def test_a_session_id_with_a_lone_surrogate_is_refused_naming_it(
    store: Store[Any],
) -> None:
    from sessions.errors import InvalidSessionIdError

    with pytest.raises(InvalidSessionIdError, match="session_id is not valid Unicode"):
        store.session("s\ud800")
    with pytest.raises(InvalidSessionIdError, match="after is not valid Unicode"):
        await store.list_sessions(after="s\ud800")


@pytest.mark.parametrize("field", ["requests", "input_tokens", "output_tokens"])
async def test_record_usage_refuses_a_count_past_64_bits_so_later_commits_still_work(
    store: Store[Any], sid: str, field: str
) -> None:
    session = await _staging(store, sid, "x")
    with pytest.raises(ValueError, match=rf"usage\.{field} is 9223372036854775808"):
        session.record_usage(TurnUsage(**{field: 2**63}))
    session.record_usage(TurnUsage(**{field: 2**62}))
    # Two usages of one turn add up: their sum must fit too.
    with pytest.raises(ValueError, match=rf"staged turns' usage\.{field} is {2**63}"):
        session.record_usage(TurnUsage(**{field: 2**62}))
    session.record_usage(TurnUsage(**{field: 2**62 - 1}))
    await session.commit()
    (turn,) = await session.turns()
    assert turn.usage is not None and getattr(turn.usage, field) == MAX_INT64


async def test_usage_sums_past_64_bits_are_exact_and_the_same_on_every_backend(
    target: Target, sid: str, tmp_path: Path
) -> None:
    """Three turns of the largest usage a turn records: the per-session and store sums
    are exact (SQLite's sum() would overflow, PostgreSQL's is numeric)."""
    # A store of this test's own (tests share the PostgreSQL schema): store.usage() sums it all.
    store = await target.fresh(tmp_path).open()
    most = TurnUsage(MAX_INT64, MAX_INT64, MAX_INT64, MAX_INT64, MAX_INT64)
    for n in range(3):
        session = store.session(f"{sid}-{n % 2}")
        await session.add_items([msg(str(n))])
        session.record_usage(most)
        await session.commit()
    assert await store.session(f"{sid}-0").usage() == TurnUsage(*[2 * MAX_INT64] * 5)
    assert await store.session(f"{sid}-1").usage() == most
    assert await store.usage() == TurnUsage(*[3 * MAX_INT64] * 5)


# ------------------------------------------------------------- finding 8: the metadata


@pytest.mark.parametrize(
    ("metadata", "words"),
    [
        ({1: "a"}, "metadata has the int key 1"),
        ({"a": {None: 1}}, r"metadata\['a'\] has the NoneType key None"),
        ({"a": [{"b": {2.5: 1}}]}, r"metadata\['a'\]\[0\]\['b'\] has the float key 2.5"),
        ({True: 1}, "metadata has the bool key True"),
    ],
)
async def test_metadata_with_a_key_that_is_not_a_string_is_refused_naming_where(
    store: Store[Any], sid: str, metadata: dict[Any, Any], words: str
) -> None:
    session = store.session(sid)
    with pytest.raises(TypeError, match="metadata keys must be str: " + words):
        session.set_info(metadata=metadata)
    await _still_commits(store, sid)


async def test_metadata_nested_past_the_limit_is_a_value_error_naming_metadata(
    store: Store[Any], sid: str
) -> None:
    session = store.session(sid)
    for depth in (MAX_METADATA_DEPTH + 1, 3000, 100_000):
        with pytest.raises(ValueError, match=r"metadata is nested more than 32 levels deep"):
            session.set_info(metadata=nested(depth))
        assert not session.has_pending
    looped: dict[str, Any] = {"a": [1]}
    looped["a"].append(looped)
    with pytest.raises(ValueError, match=r"metadata contains a reference cycle"):
        session.set_info(metadata=looped)
    deepest = nested(MAX_METADATA_DEPTH)
    await commit_one(store, sid, metadata=deepest)
    info = await store.session_info(sid)
    assert info is not None and info.metadata == deepest


async def test_metadata_text_spelling_a_backslash_u0000_is_text_not_a_nul(
    store: Store[Any], sid: str
) -> None:
    await commit_one(store, sid, metadata={"path": "C:\\u0000", "k\\u0000": 1})
    info = await store.session_info(sid)
    assert info is not None and info.metadata == {"path": "C:\\u0000", "k\\u0000": 1}
    with pytest.raises(ValueError, match=r"metadata\['path'\] must not contain NUL"):
        store.session(sid).set_info(metadata={"path": "C:\x00"})


@pytest.mark.parametrize(
    ("text", "label", "words"),
    [
        ('{"x": "\ud800"}', None, "the run state's text is not valid Unicode"),
        ('{"x": "\x00"}', None, "the run state's text must not contain NUL"),
        ("{}", "step\udc00", "label is not valid Unicode"),
        ("{}", "step\x00", "label must not contain NUL"),
    ],
)
async def test_stage_run_state_refuses_text_or_a_label_no_database_can_store(
    store: Store[Any], sid: str, text: str, label: str | None, words: str
) -> None:
    session = store.session(sid)
    with pytest.raises(ValueError, match=words):
        session.stage_run_state(text, label=label)
    await _still_commits(store, sid)
    assert (await session.run_state_record()).text is None
