"""PostgreSQL connections lost mid-commit: ``pg_terminate_backend`` of our own pool's
backends, and a proxy that drops the acknowledgement of a committed write or takes the
server away. Only this store's backends are touched (found by ``application_name``):
other tests use the same server at the same time."""

from __future__ import annotations

import asyncio
import random
import uuid
from collections.abc import Callable
from typing import Any

from sessions import RetryPolicy, Store
from sessions.errors import CommitError

from .gate import GatedBackend, GatedStore
from .harness import PG_DSN, TargetLike, pg_execute, read_history
from .invariant import Ledger, check_history, make_batch, parse_batches
from .pgproxy import PgProxy

FAST_RETRY = RetryPolicy(attempts=8, initial_delay=0.01, max_delay=0.1)


def app_name() -> str:
    return f"txs-rel-{uuid.uuid4().hex[:10]}"


async def open_named(target: TargetLike, name: str, **options: Any) -> Store[Any]:
    options.setdefault("retry", FAST_RETRY)
    return await target.open(server_settings={"application_name": name}, **options)


async def terminate(name: str) -> int:
    rows = await pg_execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE application_name = $1 AND pid <> pg_backend_pid()",
        name,
    )
    return sum(1 for r in rows if r[0])


async def wait_lock_wait(name: str, limit: int = 500) -> bool:
    """Wait (bounded) until one of our backends waits on a lock."""
    for _ in range(limit):
        rows = await pg_execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 "
            "AND wait_event_type = 'Lock'",
            name,
        )
        if rows[0][0]:
            return True
        await asyncio.sleep(0.01)
    return False


class RowLock:
    """Hold the session's row lock from another connection, so a commit blocks in the server."""

    def __init__(self, schema: str, session_id: str) -> None:
        self.schema, self.session_id = schema, session_id
        self.conn: Any = None

    async def __aenter__(self) -> RowLock:
        import asyncpg

        self.conn = await asyncpg.connect(PG_DSN)
        await self.conn.execute("BEGIN")
        await self.conn.fetch(
            f'SELECT 1 FROM "{self.schema}"."txs_sessions" WHERE session_id = $1 FOR UPDATE',
            self.session_id,
        )
        return self

    async def release(self) -> None:
        if self.conn is not None:
            await self.conn.execute("ROLLBACK")
            await self.conn.close()
            self.conn = None

    async def __aexit__(self, *exc: object) -> None:
        await self.release()


def _count(items: list[Any], w: int, b: int) -> int:
    return parse_batches(items)[0].count((w, b))


def lost_commits(gate: GatedBackend) -> tuple[int, int]:
    """Commit attempts (``Backend.apply`` calls) that a lost connection interrupted:
    ``(all, those whose outcome was unknown)``: the termination hit them in flight."""
    lost = [e for e in gate.failed_applies if "connection lost" in str(e)]
    return len(lost), sum(1 for e in lost if not e.outcome_known)


async def terminate_sweep(target: TargetLike) -> tuple[int, list[str], int]:
    """Terminate our backends before / during (blocked in the server) / after each
    commit's database call, for a plain append and for a pop+append transaction.
    Every commit must return (after retries) with its batch stored exactly once.

    Returns ``(terminations, violations, commit attempts they interrupted)``.
    """
    assert target.pg_schema is not None
    problems: list[str] = []
    tries = 0
    hits = 0
    for path in ("append", "transaction"):
        for phase in ("before", "during", "after"):
            name = app_name()
            real = await open_named(target, name)
            gated = GatedStore(real)
            gate = gated.gate
            sid = f"term-{path}-{phase}-{uuid.uuid4().hex[:8]}"
            seed = real.session(sid)
            filler = [{"type": "message", "role": "user", "content": "x"}]
            await seed.add_items(make_batch(0, 0) + (filler if path == "transaction" else []))
            await seed.commit()
            await seed.close()
            s = gated.session(sid)
            if path == "transaction":
                await s.pop_item()  # the untagged filler: a pop makes it a transaction
            await s.add_items(make_batch(0, 1))
            gate.reset()
            gate.pause = (0, phase)
            lock = RowLock(target.pg_schema, sid)
            if phase == "during":
                await lock.__aenter__()
            task = asyncio.ensure_future(s.commit())
            await asyncio.wait_for(gate.reached.wait(), 30)
            if phase == "during" and not await wait_lock_wait(name):
                problems.append(f"{path}/{phase}: the commit never blocked on the row lock")
            killed = await terminate(name)
            tries += 1
            gate.release.set()
            await lock.release()
            try:
                await asyncio.wait_for(task, 60)
            except Exception as exc:  # noqa: BLE001
                problems.append(f"{path}/{phase}: commit failed: {type(exc).__name__}: {exc}")
                await s.commit()  # the changes are still staged: must land exactly once
            if not killed:
                problems.append(f"{path}/{phase}: no backend of ours was terminated")
            stored = await read_history(target, sid)
            n = _count(stored, 0, 1)
            if n != 1:
                problems.append(f"{path}/{phase}: batch stored {n} times")
            problems += [f"{path}/{phase}: {p}" for p in check_history(stored, Ledger({0: [0, 1]}))]
            if s.has_pending:
                problems.append(f"{path}/{phase}: batch still staged after commit")
            await s.add_items(make_batch(0, 2))
            await s.commit()
            problems += [
                f"{path}/{phase} afterwards: {p}"
                for p in check_history(await read_history(target, sid), Ledger({0: [0, 1, 2]}))
            ]
            await s.close()
            await real.close()
            hits += lost_commits(gate)[0]
    return tries, problems, hits


async def commit_persistently(s: Any, w: int, b: int, *, tries: int, pause: float = 0.0) -> int:
    """Commit writer ``w``'s batch ``b``, again after each CommitError (that is safe), at
    most ``tries`` times, sleeping ``pause`` seconds after each: how many attempts gave up.
    AssertionError when none committed."""
    for gave_up in range(tries):
        try:
            await s.commit()
            return gave_up
        except CommitError:
            if pause:
                await asyncio.sleep(pause)
    raise AssertionError(f"writer {w}: batch {b} never committed")


async def persistent_writer(
    store: Store[Any],
    sid: str,
    w: int,
    ledger: Ledger,
    more: Callable[[int], bool],
    *,
    tries: int,
    pause: float = 0.0,
) -> int:
    """Writer ``w``: commits its batches 0, 1, ... to ``sid`` while ``more(b)``, each
    persistently (:func:`commit_persistently`), confirming each in ``ledger``; returns
    how many commit attempts gave up."""
    s = store.session(sid)
    gave_up = 0
    b = 0
    while more(b):
        await s.add_items(make_batch(w, b))
        gave_up += await commit_persistently(s, w, b, tries=tries, pause=pause)
        ledger.confirm(w, b)
        b += 1
    await s.close()
    return gave_up


async def terminate_storm(
    target: TargetLike, *, writers: int, batches: int, seed: int | None = None
) -> tuple[int, list[str], dict[str, Any]]:
    """``writers`` tasks commit ``batches`` batches each while another task keeps
    terminating our backends at random moments. A commit that gives up is retried by
    the writer (``commit()`` again is safe). Nothing lost, nothing duplicated.

    On a fast machine ``batches`` commits may all fall between terminations: the writers
    then go on until a termination has cut a commit in flight, at most ``20 * batches``
    batches each (so the storm tests what it is for, and still ends by itself)."""
    seed = random.randrange(2**32) if seed is None else seed
    rng = random.Random(seed)
    name = app_name()
    real = await open_named(target, name, max_size=writers + 1)
    store = GatedStore(real)  # counts the commit attempts a termination interrupted
    sid = f"storm-{uuid.uuid4().hex[:10]}"
    ledger = Ledger()
    kills = 0
    stop = asyncio.Event()

    def more(b: int) -> bool:
        return b < batches or (not lost_commits(store.gate)[0] and b < 20 * batches)

    async def killer() -> None:
        nonlocal kills
        while not stop.is_set():
            await asyncio.sleep(rng.uniform(0.0, 0.03))
            kills += await terminate(name)

    k = asyncio.ensure_future(killer())
    problems: list[str] = []
    try:
        results = await asyncio.gather(
            *(persistent_writer(store, sid, w, ledger, more, tries=50) for w in range(writers)),
            return_exceptions=True,
        )
        problems += [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
        gave_up = sum(r for r in results if isinstance(r, int))
    finally:
        stop.set()
        await k
    problems += [
        f"(seed {seed}) {p}" for p in check_history(await read_history(target, sid), ledger)
    ]
    await real.close()
    hits, unknown = lost_commits(store.gate)
    return (
        ledger.count(),
        problems,
        {
            "seed": seed,
            "backends terminated": kills,
            "commits that gave up (retried)": gave_up,
            "commit attempts interrupted": hits,
            "of which outcome unknown": unknown,
        },
    )


async def proxy_store(target: TargetLike, proxy: PgProxy, **options: Any) -> Store[Any]:
    from sessions.postgres import PostgresStore

    options.setdefault("retry", FAST_RETRY)
    store: Store[Any] = await PostgresStore.open(
        proxy.dsn(), schema=target.pg_schema or "public", min_size=1, max_size=2, **options
    )
    return store


async def lost_ack_scenario(target: TargetLike, rounds: int) -> tuple[int, list[str]]:
    """The server commits, the acknowledgement is lost: the retry must not duplicate."""
    proxy = await PgProxy().start()
    problems: list[str] = []
    try:
        store = await proxy_store(target, proxy)
        sid = f"ack-{uuid.uuid4().hex[:10]}"
        s = store.session(sid)
        ledger = Ledger()
        for b in range(rounds):
            if b % 3 == 2:  # a transaction (pop + items) instead of a one-statement append
                await s.add_items([{"type": "message", "role": "user", "content": "filler"}])
                await s.commit()
                await s.pop_item()
            await s.add_items(make_batch(0, b))
            proxy.lose_ack = 1
            try:
                await s.commit()
            except CommitError as exc:
                problems.append(f"round {b}: commit gave up: {exc}")
                proxy.lose_ack = 0
                await s.commit()  # still staged: must land exactly once
            ledger.confirm(0, b)
            if proxy.lose_ack:
                problems.append(f"round {b}: the proxy never saw the commit")
                proxy.lose_ack = 0
        problems += check_history(await read_history(target, sid), ledger)
        await s.close()
        await store.close()
        if proxy.acks_lost < rounds:
            problems.append(f"only {proxy.acks_lost} of {rounds} acknowledgements were lost")
    finally:
        await proxy.close()
    return rounds, problems


async def _commit_error(s: Any) -> CommitError | None:
    """Commit ``s``; the CommitError it raises, or None when it commits."""
    try:
        await s.commit()
    except CommitError as exc:
        return exc
    return None


async def _recommit(
    label: str, s: Any, target: TargetLike, sid: str, ledger: Ledger, b: int
) -> list[str]:
    """Commit writer 0's batch ``b`` again, as a caller may after CommitError: the
    problems with the stored history after it."""
    await s.commit()
    ledger.confirm(0, b)
    return [
        f"{label}, recommit: {p}" for p in check_history(await read_history(target, sid), ledger)
    ]


async def give_up_scenarios(target: TargetLike) -> tuple[int, list[str]]:
    """Retries run out (``attempts=1``). The caller gets CommitError; ``outcome_known``
    is accurate; the changes are still staged; a later commit applies exactly once."""
    assert target.pg_schema is not None
    problems: list[str] = []
    once = RetryPolicy(attempts=1, initial_delay=0.0)

    async def judge(
        label: str, s: Any, sid: str, exc: CommitError | None, ledger: Ledger, b: int
    ) -> None:
        if exc is None:
            problems.append(f"{label}: commit returned although it could not complete")
            return
        stored = await read_history(target, sid)
        n = _count(stored, 0, b)
        if exc.outcome_known and n:
            problems.append(
                f"{label}: outcome_known=True (nothing applied) but the batch is stored"
            )
        if s.pending.items != len(make_batch(0, b)):
            problems.append(f"{label}: staged changes not intact after CommitError: {s.pending}")
        ledger.maybe(0, b)
        problems.extend(f"{label}: {p}" for p in check_history(stored, ledger))

    # 1. Backend terminated while the commit waits on a row lock: not applied, known.
    name = app_name()
    real = await open_named(target, name, retry=once)
    gated = GatedStore(real)
    sid = f"giveup-term-{uuid.uuid4().hex[:8]}"
    s = gated.session(sid)
    await s.add_items(make_batch(0, 0))
    await s.commit()
    ledger = Ledger({0: [0]})
    await s.add_items(make_batch(0, 1))
    gated.gate.reset()
    gated.gate.pause = (0, "during")
    error: CommitError | None = None
    async with RowLock(target.pg_schema, sid) as lock:
        task = asyncio.ensure_future(s.commit())
        await asyncio.wait_for(gated.gate.reached.wait(), 30)
        await wait_lock_wait(name)
        await terminate(name)
        gated.gate.release.set()
        await lock.release()
        try:
            await asyncio.wait_for(task, 60)
        except CommitError as exc:
            error = exc
    await judge("terminated mid-commit", s, sid, error, ledger, 1)
    if error is not None and not error.outcome_known:
        problems.append(
            "terminated mid-commit: the probe could reach the database, yet outcome_known=False"
        )
    problems += await _recommit("terminated mid-commit", s, target, sid, ledger, 1)
    await s.close()
    await real.close()

    # 2. Acknowledgement lost and the server gone before the outcome could be checked.
    proxy = await PgProxy().start()
    try:
        store = await proxy_store(target, proxy, retry=once)
        sid = f"giveup-ack-{uuid.uuid4().hex[:8]}"
        s = store.session(sid)
        ledger = Ledger()
        await s.add_items(make_batch(0, 0))
        proxy.lose_ack = 1
        orig_applied = store.backend.applied

        async def applied_while_down(session_id: str, ids: Any) -> Any:
            proxy.go_down()
            return await orig_applied(session_id, ids)

        store.backend.applied = applied_while_down  # type: ignore[method-assign,assignment]
        error = await _commit_error(s)
        store.backend.applied = orig_applied  # type: ignore[method-assign]
        proxy.come_up()
        if error is not None and error.outcome_known:
            problems.append(
                "lost ack + server down: outcome_known=True although the batch was committed"
            )
        await judge("lost ack, server down", s, sid, error, ledger, 0)
        problems += await _recommit("lost ack", s, target, sid, ledger, 0)

        # 3. Server down before the commit: nothing can be applied.
        await s.add_items(make_batch(0, 1))
        proxy.go_down()
        error = await _commit_error(s)
        proxy.come_up()
        await judge("server down", s, sid, error, ledger, 1)
        problems += await _recommit("server down", s, target, sid, ledger, 1)
        await s.close()
        await store.close()
    finally:
        await proxy.close()
    return 3, problems
