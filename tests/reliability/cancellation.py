"""Cancellation sweep: interrupt every operation at every suspension point.

Each operation gets a fresh session in a known state; ``gate.sweep`` interrupts it at
every event-loop step and around every database call, by ``cancel()``, by
``cancel()`` twice and by an expiring ``asyncio.timeout``. The judge then checks the
contract:

* a write that started (``commit``, autocommit ``add_items`` / ``pop_item`` /
  ``clear_session``) reached its outcome before ``CancelledError`` was raised: the
  batch is stored whole (and no longer staged), never half, never lost;
* a write cancelled before it ran did nothing (and a staged batch is still staged);
* a read (``get_items``) or a staging ``pop_item`` leaves nothing half-staged;
* afterwards the same session works: its view equals what is stored, a further
  commit applies exactly once, and the stored history satisfies the invariant.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from sessions import BufferedSession, RetryPolicy, Store
from sessions.errors import CommitError

from .gate import MODES, GatedStore, Outcome, sweep
from .harness import RawReader, TargetLike, read_history
from .invariant import Ledger, check_history, make_batch, parse_batches

W = 0  # writer id used by every single-writer scenario


def _sid(op: str) -> str:
    return f"cancel-{op}-{uuid.uuid4().hex[:12]}"


def _count(stored: list[Any], batch: int) -> int:
    runs, _ = parse_batches(stored)
    return runs.count((W, batch))


@dataclass
class Ctx:
    target: TargetLike  # the database, read raw by ``stored``
    real: Store[Any]  # the store under the gate
    gated: GatedStore
    gated_once: GatedStore  # retry=attempts 1, for unknown-outcome set-ups
    reader: RawReader

    async def stored(self, sid: str) -> list[Any]:
        """The raw rows' history; what is wrong with them is in ``.problems``."""
        return await read_history(self.target, sid, reader=self.reader)

    async def seed(self, sid: str, batches: list[int]) -> list[Any]:
        session = self.real.session(sid)
        for b in batches:
            await session.add_items(make_batch(W, b))
            await session.commit()
        await session.close()
        return await self.stored(sid)


async def _finish(ctx: Ctx, s: BufferedSession, sid: str, problems: list[str]) -> None:
    """The session must still work: view == stored, next commit lands exactly once."""
    try:
        if s.has_pending:
            await s.commit()
        stored = await ctx.stored(sid)
        view = await s.get_items()
        if view != stored:
            problems.append(
                f"session view differs from the stored history ({len(view)} vs {len(stored)} items)"
            )
        extra = make_batch(W, 99)
        await s.add_items(extra)
        if not s.autocommit:
            await s.commit()
        after = await ctx.stored(sid)
        if after != stored + extra:
            problems.append("a commit after the interruption did not append exactly its batch")
        problems += getattr(after, "problems", [])  # the raw rows and metadata at the end
    except Exception as exc:  # noqa: BLE001 - a broken session is a violation
        problems.append(f"session unusable afterwards: {type(exc).__name__}: {exc}")
    finally:
        if s.has_pending:
            await s.rollback()
        await s.close()


def _whole(stored: list[Any], confirmed: list[int], maybe: tuple[int, ...] = ()) -> list[str]:
    ledger = Ledger()
    for b in confirmed:
        ledger.confirm(W, b)
    for b in maybe:
        ledger.maybe(W, b)
    return check_history(stored, ledger)


Op = Callable[[], Awaitable[Any]]
Make = Callable[[], Awaitable[Op]]
Judge = Callable[[Outcome], Awaitable[list[str]]]


def _write_scenario(ctx: Ctx, *, autocommit: bool) -> tuple[Make, Judge]:
    """``commit()`` of a staged batch, or an autocommit ``add_items``."""
    state: dict[str, Any] = {}

    async def make() -> Op:
        sid = _sid("autoadd" if autocommit else "commit")
        await ctx.seed(sid, [0, 1])
        s = ctx.gated.session(sid, autocommit=autocommit)
        state.update(sid=sid, s=s)
        if autocommit:
            return lambda: s.add_items(make_batch(W, 2))
        await s.add_items(make_batch(W, 2))
        return s.commit

    async def judge(out: Outcome) -> list[str]:
        sid, s = state["sid"], state["s"]
        problems: list[str] = []
        stored = await ctx.stored(sid)
        n = _count(stored, 2)
        if out.error is not None:
            problems.append(f"unexpected {type(out.error).__name__}: {out.error}")
        if n > 1:
            problems.append("batch stored more than once")
        if out.started and n == 0:
            problems.append(
                "the write started but raised before its outcome: batch not stored"
                + (" and no longer staged (LOST)" if not s.has_pending else "")
            )
        if not out.started and n:
            problems.append("cancelled before it ran, yet the batch was stored")
        if n and s.has_pending:
            problems.append("batch stored but still staged (a later commit could duplicate it)")
        if not n and not s.has_pending and not autocommit:
            problems.append("batch neither stored nor staged (LOST)")
        problems += _whole(stored, [0, 1] + ([2] if n else []))
        await _finish(ctx, s, sid, problems)
        return problems

    return make, judge


async def _seeded(ctx: Ctx, state: dict[str, Any], name: str, autocommit: bool) -> Any:
    """A gated session of a history seeded with two items (kept in ``state``)."""
    sid = _sid(f"auto{name}" if autocommit else name)
    before = await ctx.seed(sid, [0, 1])
    s = ctx.gated.session(sid, autocommit=autocommit)
    state.update(sid=sid, s=s, before=before)
    return s


async def _looked_at(
    ctx: Ctx, state: dict[str, Any], out: Outcome
) -> tuple[str, Any, list[Any], list[Any], list[str]]:
    """What ``_seeded`` kept, the stored history, and an unexpected error as a problem."""
    sid, s, before = state["sid"], state["s"], state["before"]
    problems: list[str] = []
    stored = await ctx.stored(sid)
    if out.error is not None:
        problems.append(f"unexpected {type(out.error).__name__}: {out.error}")
    return sid, s, before, stored, problems


Check = Callable[[Outcome, Any, list[Any], list[Any], list[str]], Awaitable[None]]


def _seeded_scenario(
    ctx: Ctx, name: str, method: str, autocommit: bool, check: Check
) -> tuple[Make, Judge]:
    """``method`` of a session over a seeded history (:func:`_seeded`); ``check(out, s,
    before, stored, problems)`` adds what is wrong with the outcome to ``problems``."""
    state: dict[str, Any] = {}

    async def make() -> Op:
        op: Op = getattr(await _seeded(ctx, state, name, autocommit), method)
        return op

    async def judge(out: Outcome) -> list[str]:
        sid, s, before, stored, problems = await _looked_at(ctx, state, out)
        await check(out, s, before, stored, problems)
        await _finish(ctx, s, sid, problems)
        return problems

    return make, judge


def _pop_scenario(ctx: Ctx, *, autocommit: bool) -> tuple[Make, Judge]:
    async def check(
        out: Outcome, s: Any, before: list[Any], stored: list[Any], problems: list[str]
    ) -> None:
        if out.completed and out.result != before[-1]:
            problems.append(f"pop_item returned {out.result!r}, not the newest item")
        if autocommit:
            popped = out.completed or (out.started and out.interrupted)
            want = before[:-1] if popped else before
            if stored != want:
                problems.append(
                    f"stored history has {len(stored)} items, expected {len(want)} "
                    f"({'pop should have been applied' if popped else 'nothing should change'})"
                )
            if s.has_pending:
                problems.append("autocommit pop left something staged")
        else:
            if stored != before:
                problems.append("a staged pop changed the database before commit")
            pops = s.pending.pops
            if out.completed and pops != 1:
                problems.append(f"pop_item returned but {pops} pop(s) are staged")
            if not out.completed and pops:
                problems.append("pop_item was interrupted yet left a pop staged (item lost unseen)")
            view = await s.get_items()
            if view != (before[:-1] if out.completed else before):
                problems.append("session view does not match the staged pop")

    return _seeded_scenario(ctx, "pop", "pop_item", autocommit, check)


def _clear_scenario(ctx: Ctx, *, autocommit: bool) -> tuple[Make, Judge]:
    async def check(
        out: Outcome, s: Any, before: list[Any], stored: list[Any], problems: list[str]
    ) -> None:
        applied = out.completed or (out.started and out.interrupted)
        if autocommit:
            want = [] if applied else before
            if stored != want:
                problems.append(f"stored history has {len(stored)} items, expected {len(want)}")
            if s.has_pending:
                problems.append("autocommit clear left something staged")
        else:
            if stored != before:
                problems.append("a staged clear changed the database before commit")
            if out.completed and not s.pending.clear:
                problems.append("clear_session returned but no clear is staged")
            if not out.started and s.has_pending:
                problems.append("clear_session never ran, yet something is staged")

    return _seeded_scenario(ctx, "clear", "clear_session", autocommit, check)


def _read_scenario(ctx: Ctx) -> tuple[Make, Judge]:
    """``get_items`` with a staged batch on top of stored history."""
    state: dict[str, Any] = {}

    async def make() -> Op:
        sid = _sid("read")
        before = await ctx.seed(sid, [0, 1])
        s = ctx.gated.session(sid)
        await s.add_items(make_batch(W, 2))
        state.update(sid=sid, s=s, before=before)
        return s.get_items

    async def judge(out: Outcome) -> list[str]:
        sid, s, before = state["sid"], state["s"], state["before"]
        problems: list[str] = []
        if out.error is not None:
            problems.append(f"unexpected {type(out.error).__name__}: {out.error}")
        if out.completed and out.result != before + make_batch(W, 2):
            problems.append("get_items did not return stored + staged items")
        if await ctx.stored(sid) != before:
            problems.append("get_items changed the database")
        if s.pending.items != len(make_batch(W, 2)) or s.pending.pops or s.pending.clear:
            problems.append(f"get_items changed what is staged: {s.pending}")
        await s.commit()
        problems += _whole(await ctx.stored(sid), [0, 1, 2])
        await _finish(ctx, s, sid, problems)
        return problems

    return make, judge


def _unknown_outcome_scenario(ctx: Ctx, *, op_name: str) -> tuple[Make, Judge]:
    """A commit whose outcome is unknown (stored, acknowledgement lost, check failed);
    then ``get_items`` (which resolves it through ``applied``) or ``commit`` again."""
    state: dict[str, Any] = {}

    async def make() -> Op:
        sid = _sid(f"unknown-{op_name}")
        await ctx.seed(sid, [0, 1])
        s = ctx.gated_once.session(sid)
        await s.add_items(make_batch(W, 2))
        gate = ctx.gated_once.gate
        gate.lose_ack, gate.fail_applied = 1, 1
        setup_problem = None
        try:
            await s.commit()
            setup_problem = "commit with a lost acknowledgement returned"
        except CommitError as exc:
            if exc.outcome_known:
                setup_problem = "CommitError.outcome_known is True although the outcome is unknown"
        gate.lose_ack = gate.fail_applied = 0
        state.update(sid=sid, s=s, setup=setup_problem)
        return s.get_items if op_name == "get_items" else s.commit

    async def judge(out: Outcome) -> list[str]:
        sid, s = state["sid"], state["s"]
        problems: list[str] = [state["setup"]] if state["setup"] else []
        if out.error is not None:
            problems.append(f"unexpected {type(out.error).__name__}: {out.error}")
        stored = await ctx.stored(sid)
        if _count(stored, 2) != 1:
            problems.append(f"batch stored {_count(stored, 2)} times, expected once")
        if out.completed and op_name == "get_items" and out.result != stored:
            problems.append(
                "get_items shows the batch twice or not at all after an unknown outcome"
            )
        problems += _whole(stored, [0, 1, 2])
        await _finish(ctx, s, sid, problems)
        problems += _whole(await ctx.stored(sid), [0, 1, 2, 99])
        return problems

    return make, judge


SCENARIOS: dict[str, Callable[[Ctx], tuple[Make, Judge]]] = {
    "commit": lambda c: _write_scenario(c, autocommit=False),
    "autocommit add_items": lambda c: _write_scenario(c, autocommit=True),
    "autocommit pop_item": lambda c: _pop_scenario(c, autocommit=True),
    "pop_item (staged)": lambda c: _pop_scenario(c, autocommit=False),
    "autocommit clear_session": lambda c: _clear_scenario(c, autocommit=True),
    "clear_session (staged)": lambda c: _clear_scenario(c, autocommit=False),
    "get_items": _read_scenario,
    "get_items after unknown outcome": lambda c: _unknown_outcome_scenario(c, op_name="get_items"),
    "commit after unknown outcome": lambda c: _unknown_outcome_scenario(c, op_name="commit"),
}


async def open_ctx(target: TargetLike) -> Ctx:
    real = await target.open()
    return Ctx(
        target=target,
        reader=target.raw_reader(),
        real=real,
        gated=GatedStore(real),
        gated_once=GatedStore(real, retry=RetryPolicy(attempts=1, initial_delay=0.0)),
    )


async def run_sweep(
    target: TargetLike,
    names: list[str] | None = None,
    modes: tuple[str, ...] = MODES,
    *,
    stats: dict[str, int] | None = None,
) -> dict[str, tuple[int, list[str]]]:
    """``{scenario: (interruptions tried, violations)}`` for every operation.

    ``stats["commit in flight"]`` (if given) counts the interruptions that landed while
    a ``Backend.apply`` (a commit's database call) was running.
    """
    ctx = await open_ctx(target)
    results: dict[str, tuple[int, list[str]]] = {}
    try:
        for name in names or list(SCENARIOS):
            make, judge = SCENARIOS[name](ctx)
            gate = ctx.gated_once.gate if "unknown" in name else ctx.gated.gate
            results[name] = await sweep(gate, make, judge, modes=modes)
    finally:
        await ctx.reader.close()
        await ctx.real.close()
    if stats is not None:
        hits = ctx.gated.gate.interrupted_commits + ctx.gated_once.gate.interrupted_commits
        stats["commit in flight"] = stats.get("commit in flight", 0) + hits
    return results
