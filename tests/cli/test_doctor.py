"""``sessions doctor``: finds planted defects in a big store, repairs them, idempotently.

The big stores are written with bulk SQL through each backend's own schema (10,000
sessions on SQLite, 500 on PostgreSQL), with each defect kind planted in known
sessions; the command runs as a child process (as in tests/cli/test_cli.py).
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from sessions import open_store
from sessions._engine.commit import write_batches
from sessions._tools.doctor import check_rows, check_store, repair_batch
from tests.conftest import PG_DSN, Target
from tests.provision import SQLiteProvision

from .test_cli import Result, cli, one_error_line

SIZES = {"sqlite": 10_000, "postgres": 500}

ORPHAN, MISSING, DUP_ID, CORRUPT, PENDING, MIXED = range(1, 7)


def _text(item: Any) -> str:
    return json.dumps(item, ensure_ascii=False, separators=(",", ":"))


def _conversation(i: int) -> list[Any]:
    return [
        {"role": "user", "content": f"weather {i}?"},
        {
            "type": "function_call",
            "name": "get_weather",
            "arguments": "{}",
            "call_id": f"call_{i}",
            "id": f"fc_{i}",
        },
        {"type": "function_call_output", "call_id": f"call_{i}", "output": "sunny"},
        {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{i}",
            "content": [{"type": "output_text", "text": "It is sunny."}],
        },
    ]


@dataclass
class Planted:
    """A store's rows, and the defects planted in it: ``(session, key, kind)``."""

    rows: dict[str, list[str]] = field(default_factory=dict)
    defects: set[tuple[str, int, str]] = field(default_factory=set)
    pending: set[str] = field(default_factory=set)  # sessions with a saved run state

    def keys(self, session_id: str) -> set[int]:
        return {key for sid, key, _ in self.defects if sid == session_id}

    def removed(self, session_id: str) -> list[str]:
        """The texts a repair moves out of ``session_id``, oldest first."""
        return [self.rows[session_id][key - 1] for key in sorted(self.keys(session_id))]

    def kept(self, session_id: str) -> list[str]:
        """The texts a repair leaves in ``session_id``, oldest first."""
        gone = self.keys(session_id)
        rows = self.rows[session_id]
        return [text for key, text in enumerate(rows, 1) if key not in gone]


def _plant(i: int, kind: int, planted: Planted, sid: str) -> list[str]:
    """Session ``i``'s rows (keys 1..n) with defect ``kind`` planted; records the defect."""
    items = [_text(item) for item in _conversation(i)]
    if kind in (ORPHAN, MIXED):
        items.insert(3, _text({"type": "function_call_output", "call_id": "ghost", "output": "?"}))
        planted.defects.add((sid, 4, "orphan_output"))
    if kind == MISSING:
        call = {"type": "function_call", "name": "lost", "arguments": "{}", "call_id": f"lost_{i}"}
        items.insert(3, _text(call))
        planted.defects.add((sid, 4, "missing_output"))
    if kind == DUP_ID:
        items.append(items[3])  # the assistant message again, with the same id
        planted.defects.add((sid, 5, "duplicate_id"))
    if kind in (CORRUPT, MIXED):
        items[1:1] = ["{not json", "[1, 2]"]
        planted.defects |= {(sid, 2, "not_an_object"), (sid, 3, "not_an_object")}
        if kind == MIXED:  # the orphan moved down by two
            planted.defects = (planted.defects - {(sid, 4, "orphan_output")}) | {
                (sid, 6, "orphan_output")
            }
    if kind == PENDING:  # a run waiting for approval: its last call may wait
        call = {"type": "function_call", "name": "ask", "arguments": "{}", "call_id": f"ask_{i}"}
        items.append(_text(call))
        planted.pending.add(sid)
    return items


def plan(count: int) -> Planted:
    step = 997 if count > 2000 else 97
    planted = Planted()
    for i in range(count):
        sid = f"s-{i:05d}"
        planted.rows[sid] = _plant(i, i % step, planted, sid)
    return planted


async def _build(db: Target, planted: Planted) -> None:
    """Write ``planted`` straight into an empty store's tables (bulk, past the package)."""
    store = await open_store(db.url)  # our schema, every migration
    await store.close()
    now = db.stamp(datetime.now(timezone.utc))
    await db.bulk_insert(
        "sessions",
        ["session_id", "created_at", "updated_at", "item_count", "next_seq"],
        [(sid, now, now, len(r), len(r) + 1) for sid, r in planted.rows.items()],
    )
    await db.bulk_insert(
        "items",
        ["session_id", "seq", "batch_id", "data"],
        [
            (sid, key, "seed", text)
            for sid, rows in planted.rows.items()
            for key, text in enumerate(rows, 1)
        ],
    )
    await db.bulk_insert(
        "run_states",
        ["session_id", "version", "data", "label", "updated_at"],
        [(sid, 1, "{}", None, now) for sid in planted.pending],
    )


async def _build_sqlite(path: str, planted: Planted) -> None:
    await _build(SQLiteProvision(path), planted)


@dataclass
class BigStore:
    url: str
    planted: Planted


@pytest.fixture
async def big(target: Target, tmp_path: Path) -> BigStore:
    planted = plan(SIZES[target.kind])
    db = target.fresh(tmp_path)
    await _build(db, planted)
    return BigStore(db.url, planted)


def _report(result: Result) -> dict[str, Any]:
    assert result.code in (0, 1), result.err
    report: dict[str, Any] = json.loads(result.out)
    return report


def _found(report: dict[str, Any], field_name: str = "problems") -> set[tuple[str, int, str]]:
    return {
        (entry["session_id"], problem["key"], problem["kind"])
        for entry in report["sessions"]
        for problem in entry[field_name]
    }


def _sdk_problems(result: Result) -> set[tuple[str, int, str]]:
    """What a ``doctor --json`` run over the SDK's tables found; it must have exited 1."""
    report = _report(result)
    assert result.code == 1 and report["kind"] == "sdk"
    return _found(report)


def _quarantined(report: dict[str, Any]) -> dict[str, list[str]]:
    return {
        entry["session_id"]: [q["data"] for q in entry["quarantine"]]
        for entry in report["sessions"]
        if entry["quarantine"]
    }


async def _history(url: str) -> dict[str, list[str]]:
    """Every session's stored rows (raw text), read through the admin interface."""
    store = await open_store(url, create=False)
    try:
        out: dict[str, list[str]] = {}
        async for info in store.iter_sessions():
            rows = await store.backend.read_range(  # type: ignore[attr-defined]
                info.session_id, after=None, limit=1_000_000
            )
            out[info.session_id] = [text for _, text in rows]
        return out
    finally:
        await store.close()


async def test_doctor_finds_every_planted_defect_repairs_all_and_a_rerun_is_clean_and_a_noop(
    big: BigStore,
) -> None:
    planted = big.planted
    scan = await cli("doctor", "--json", "--db", big.url)
    report = _report(scan)
    assert scan.code == 1  # problems remain
    assert _found(report) == planted.defects
    assert report["checked_sessions"] == len(planted.rows)
    assert report["problems_found"] == report["problems_remaining"] == len(planted.defects)
    assert report["clean"] is False

    repaired = await cli("doctor", "--repair", "--json", "--db", big.url)
    after_repair = _report(repaired)
    assert repaired.code == 0, repaired.out[-2000:]  # everything found was repaired
    assert _found(after_repair, "repaired") == planted.defects
    damaged = {sid for sid, _, _ in planted.defects}
    assert _quarantined(after_repair) == {sid: planted.removed(sid) for sid in damaged}

    # What stays is the original history minus exactly the quarantined rows.
    stored = await _history(big.url)
    assert stored == {sid: planted.kept(sid) for sid in planted.rows}

    again = await cli("doctor", "--json", "--db", big.url)
    clean = _report(again)
    assert again.code == 0 and clean["clean"] is True and _found(clean) == set()
    assert _quarantined(clean) == {sid: planted.removed(sid) for sid in damaged}

    noop = await cli("doctor", "--repair", "--json", "--db", big.url)
    assert noop.code == 0 and _report(noop)["repaired_rows"] == 0
    assert await _history(big.url) == stored
    assert _quarantined(_report(noop)) == _quarantined(clean)  # nothing quarantined twice


async def test_doctor_text_report_names_sessions_rows_and_kinds(big: BigStore) -> None:
    some = sorted(big.planted.defects)[0]
    text = await cli("doctor", some[0], "--db", big.url)
    assert text.code == 1, text.err
    assert f"session {some[0]}:" in text.out
    assert f"row {some[1]}: {some[2]}" in text.out
    assert "checked 1 session" in text.out and "--repair quarantines them" in text.out


async def test_a_repair_interrupted_after_some_sessions_is_completed_once_by_a_rerun(
    tmp_path: Path,
) -> None:
    planted = plan(300)
    path = str(tmp_path / "cut.db")
    await _build_sqlite(path, planted)
    url = f"sqlite:///{path}"
    store = await open_store(url)
    try:
        repaired = 0
        async for check in check_store(store, repair=True):
            repaired += bool(check.repaired)
            if repaired == 2:
                break  # "crash" after two sessions were repaired
    finally:
        await store.close()
    rerun = _report(await cli("doctor", "--repair", "--json", "--db", url))
    damaged = {sid for sid, _, _ in planted.defects}
    assert rerun["repaired_sessions"] == len(damaged) - 2
    assert _quarantined(rerun) == {sid: planted.removed(sid) for sid in damaged}


async def test_a_repair_batch_is_derived_from_what_it_removes_and_applies_once(
    store: Any, sid: str
) -> None:
    session = store.session(sid)
    orphan = {"type": "function_call_output", "call_id": "ghost", "output": "?"}
    await session.add_items([{"role": "user", "content": "hi"}])
    await session.commit()
    # Stored as a raw row, as an old store or another writer might have left it.
    await write_batches(store, sid, [_raw_batch(sid, [_text(orphan)])])
    rows = await store.backend.read_range(sid, after=None, limit=100)
    first = repair_batch(check_rows(sid, rows), rows)
    second = repair_batch(check_rows(sid, rows), rows)
    assert first is not None and second is not None
    assert first[0].batch_id == second[0].batch_id and first[0].batch_id.startswith("doc-")
    await write_batches(store, sid, [first[0]])
    await write_batches(store, sid, [second[0]])  # a resend after a crash: skipped by id
    assert [e.data for e in await store.read_quarantine(sid)] == [_text(orphan)]
    assert await session.get_items() == [{"role": "user", "content": "hi"}]


async def test_a_repair_planned_before_a_concurrent_write_is_refused_and_replanned(
    store: Any, sid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sessions._tools.doctor as doctor

    call = {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"}
    went_past = [{"role": "user", "content": "hi"}, call, {"role": "assistant", "content": "ok"}]
    late = {"type": "function_call_output", "call_id": "c1", "output": "late"}
    await write_batches(store, sid, [_raw_batch(sid, [_text(i) for i in went_past])])
    real = doctor.write_batches
    attempts: list[str] = []

    async def with_a_writer_in_between(target: Any, session_id: str, batches: Any) -> None:
        if not attempts:  # the call's output arrives after doctor read the session
            await real(target, session_id, [_raw_batch(session_id, [_text(late)])])
        attempts.append(batches[0].batch_id)
        await real(target, session_id, batches)

    monkeypatch.setattr(doctor, "write_batches", with_a_writer_in_between)
    checks = [check async for check in check_store(store, session_id=sid, repair=True)]
    # The repair planned without the output (take the call out) was refused; judged
    # again, the history is whole: nothing removed.
    assert len(attempts) == 1 and checks[0].problems == [] and checks[0].repaired == []
    assert await store.session(sid).get_items() == [*went_past, late]
    assert await store.read_quarantine(sid) == []


def _raw_batch(sid: str, texts: list[str]) -> Any:
    from sessions._model.backend import Batch

    return Batch(f"raw-{uuid.uuid4().hex}", False, (), tuple(texts))


def test_check_rows_keys_problems_by_row_and_tells_corrupt_rows_apart() -> None:
    rows = [
        (10, _text({"role": "user", "content": "hi"})),
        (11, '{"n": NaN}'),
        (12, _text({"type": "function_call_output", "call_id": "x", "output": "1"})),
        (13, '"just a string"'),
    ]
    check = check_rows("s", rows)
    assert [(p.key, p.kind) for p in check.problems] == [
        (11, "not_an_object"),
        (12, "orphan_output"),
        (13, "not_an_object"),
    ]
    assert "NaN" not in check.problems[0].message  # messages never show the row's text
    assert check.tail == 13


async def test_a_pending_call_at_the_end_of_a_history_is_not_a_problem(
    tmp_path: Path,
) -> None:
    planted = plan(10)  # session s-00005 is PENDING
    path = str(tmp_path / "pending.db")
    await _build_sqlite(path, planted)
    result = _report(await cli("doctor", "s-00005", "--json", "--db", f"sqlite:///{path}"))
    assert result["clean"] is True
    # The same rows, judged as a finished history, hold a call without an output.
    rows = list(enumerate(planted.rows["s-00005"], 1))
    finished = check_rows("s-00005", rows, finished=True).problems
    assert [p.kind for p in finished] == ["missing_output"]


# --------------------------------------------------------------------------- SDK databases


async def test_doctor_reads_an_sdk_sqlite_session_file_and_refuses_to_repair_it(
    tmp_path: Path,
) -> None:
    from agents import SQLiteSession

    path = tmp_path / "agents.db"
    good = SQLiteSession("good", str(path))
    await good.add_items(_conversation(1))  # type: ignore[arg-type]
    bad = SQLiteSession("bad", str(path))
    orphan = {"type": "function_call_output", "call_id": "nowhere", "output": "x"}
    await bad.add_items([{"role": "user", "content": "hi"}, orphan])  # type: ignore[list-item]
    good.close()
    bad.close()
    before = path.read_bytes()

    url = f"sqlite:///{path}"
    scan, text, repair, one = await asyncio.gather(
        cli("doctor", "--json", "--db", url),
        cli("doctor", "--db", url),
        cli("doctor", "--repair", "--db", url),
        cli("doctor", "good", "--json", "--sdk", "--db", url),
    )
    report = _report(scan)
    assert scan.code == 1 and report["kind"] == "sdk"
    assert _found(report) == {("bad", 2, "orphan_output")}  # rows keyed by position
    assert report["checked_sessions"] == 2
    assert text.code == 1 and "row 2: orphan_output [nowhere]" in text.out
    one_error_line(repair, "--repair", "sessions migrate")
    assert repair.code == 2
    assert one.code == 0 and _report(one)["checked_sessions"] == 1
    unknown = await cli("doctor", "nobody", "--json", "--db", url)
    one_error_line(unknown, "unknown session 'nobody'")
    assert unknown.out == ""  # no half-written JSON before the error
    assert path.read_bytes() == before  # read-only


async def test_doctor_reads_sqlalchemy_session_tables_by_their_url(tmp_path: Path) -> None:
    pytest.importorskip("sqlalchemy")
    from agents.extensions.memory import SQLAlchemySession

    url = f"sqlite+aiosqlite:///{tmp_path / 'sa.db'}"
    session = SQLAlchemySession.from_url("chat", url=url, create_tables=True)
    call = {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"}
    await session.add_items(  # type: ignore[list-item]
        [call, {"role": "assistant", "content": "went on without the output"}]
    )
    await session._engine.dispose()
    result = await cli("doctor", "--json", "--db", url)  # a SQLAlchemy URL: the SDK's tables
    assert _sdk_problems(result) == {("chat", 1, "missing_output")}


async def test_doctor_sdk_reads_sqlalchemy_session_tables_on_postgres(
    sdk_pg_schema: str,
) -> None:
    pytest.importorskip("sqlalchemy")
    from agents.extensions.memory import SQLAlchemySession
    from sqlalchemy.ext.asyncio import create_async_engine

    url = PG_DSN.replace("postgresql://", "postgresql+asyncpg://", 1)
    engine = create_async_engine(
        url, connect_args={"server_settings": {"search_path": sdk_pg_schema}}
    )
    try:
        session = SQLAlchemySession("pg", engine=engine, create_tables=True)
        orphan = {"type": "function_call_output", "call_id": "gone", "output": "x"}
        await session.add_items([{"role": "user", "content": "hi"}, orphan])  # type: ignore[list-item]
    finally:
        await engine.dispose()
    scan = await cli("doctor", "--sdk", "--source-schema", sdk_pg_schema, "--json", "--db", url)
    assert _sdk_problems(scan) == {("pg", 2, "orphan_output")}


async def test_user_text_in_the_report_is_shown_literally_and_json_stays_exact(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'evil.db'}"
    store = await open_store(url)
    evil_id, evil_call = "evil\x1b[31m[bold]", "call\u202e\n2"
    orphan = {"type": "function_call_output", "call_id": evil_call, "output": "\x1b]0;pwned\x07"}
    try:
        rows = [_text(orphan), "\x1b[2J not json"]
        await write_batches(store, evil_id, [_raw_batch(evil_id, rows)])
    finally:
        await store.close()
    text, as_json = await asyncio.gather(
        cli("doctor", "--db", url), cli("doctor", "--json", "--db", url)
    )
    assert text.code == 1
    assert "\x1b" not in text.out and "\u202e" not in text.out
    assert "session evil\\x1b[31m[bold]: 2 problems" in text.out
    assert "[call\\u202e\\n2]" in text.out
    report = _report(as_json)
    assert _found(report) == {(evil_id, 1, "orphan_output"), (evil_id, 2, "not_an_object")}
    assert report["sessions"][0]["problems"][0]["call_id"] == evil_call
    repaired = _report(await cli("doctor", "--repair", "--json", "--db", url))
    assert _quarantined(repaired) == {evil_id: rows}
    listed = await cli("doctor", "--db", url)  # clean now; the quarantine is listed
    assert listed.code == 0 and "\x1b" not in listed.out and "\x07" not in listed.out
    assert "\\u001b]0;pwned\\u0007" in listed.out  # the stored JSON text, as stored
    assert "\\x1b[2J not json" in listed.out  # a raw control character, escaped


async def test_doctor_usage_errors_are_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'u.db'}"
    store = await open_store(url)
    await store.close()
    unknown, table_option, too_long = await asyncio.gather(
        cli("doctor", "nope", "--db", url),
        cli("doctor", "--messages-table", "m", "--db", url),
        cli("doctor", "x" * 2000, "--db", url),
    )
    one_error_line(unknown, "unknown session 'nope'")
    assert unknown.code == 1
    one_error_line(table_option, "--messages-table", "--sdk")
    assert table_option.code == 2
    one_error_line(too_long, "bad session id")
    assert too_long.code == 2


async def test_the_doctor_benchmark_runs_on_a_small_store() -> None:
    from benchmarks.doctor import measure

    figures = await measure(200, 1)
    assert (figures["problems_found"], figures["problems_repaired"]) == (2, 2)
    assert figures["problems_after_repair"] == 0
