"""The workloads (a)-(d). Each returns plain JSON-able dicts keyed by subject key.

Timing on a small shared machine is noisy, so every single-session figure is the
median of several rounds, and the subjects take turns within a round (the order
rotates) so that a noisy moment does not land on one subject only.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import math
import statistics
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from ._config import Config
from ._data import TurnSource
from ._subjects import Subject

log = logging.getLogger("benchmarks")

Result = dict[str, Any]


def _rotate(items: Sequence[Subject], n: int) -> list[Subject]:
    if not items:
        return []
    k = n % len(items)
    return list(items[k:]) + list(items[:k])


def _pct(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))
    return ordered[index]


def _entry(subject: Subject) -> Result:
    return {"label": subject.label, "kind": subject.kind, "work": subject.work}


async def open_all(subjects: list[Subject]) -> tuple[list[Subject], dict[str, str]]:
    """Open every subject; one that cannot open is reported, not fatal."""
    opened: list[Subject] = []
    failed: dict[str, str] = {}
    for subject in subjects:
        try:
            await subject.open()
        except Exception as exc:  # noqa: BLE001 - reported in the results
            log.warning("cannot open %s: %s: %s", subject.key, type(exc).__name__, exc)
            failed[subject.key] = f"{type(exc).__name__}: {exc}"
            continue
        opened.append(subject)
    return opened, failed


async def close_all(subjects: list[Subject]) -> None:
    for subject in subjects:
        try:
            await subject.close()
        except Exception as exc:  # noqa: BLE001 - closing is best effort
            log.warning("closing %s failed: %s", subject.key, exc)


async def _verify(subject: Subject, sid: str, count: int, last: list[Any]) -> bool:
    """The subject really stored what it was given: ``count`` items, newest last."""
    stored = await subject.read(sid, None)
    tail = await subject.read(sid, len(last))
    ok = len(stored) == count and tail == last and stored[-len(last) :] == last
    if not ok:
        log.warning(
            "%s: stored %d items, expected %d (tail ok: %s)",
            subject.key,
            len(stored),
            count,
            tail == last,
        )
    return ok


# ----------------------------------------------------------------------------- (a)


async def commit_per_turn(
    subjects: list[Subject], cfg: Config, progress: Callable[[str], None]
) -> Result:
    """(a) One session, one durable commit per turn of four items."""
    source = TurnSource()
    out: Result = {s.key: {**_entry(s), "rounds": [], "latencies": []} for s in subjects}
    for r in range(cfg.a_rounds):
        for subject in _rotate(subjects, r):
            sid = f"a-{r}"
            for _ in range(3):  # warm-up: connection, prepared statements, session row
                await subject.turn(sid, source.next())
            gc.collect()
            lat: list[float] = []
            start = time.perf_counter()
            for _ in range(cfg.a_turns):
                items = source.next()
                t0 = time.perf_counter()
                await subject.turn(sid, items)
                lat.append(time.perf_counter() - t0)
            elapsed = time.perf_counter() - start
            out[subject.key]["rounds"].append(cfg.a_turns / elapsed)
            out[subject.key]["latencies"].extend(lat)
            ok = await _verify(subject, sid, (3 + cfg.a_turns) * 4, items)
            out[subject.key]["verified"] = out[subject.key].get("verified", True) and ok
        progress(f"  (a) round {r + 1}/{cfg.a_rounds} done")
    for entry in out.values():
        lat = entry.pop("latencies")
        entry["turns_per_s"] = statistics.median(entry["rounds"])
        entry["p50_ms"] = _pct(lat, 0.50) * 1e3
        entry["p99_ms"] = _pct(lat, 0.99) * 1e3
    return out


# ----------------------------------------------------------------------------- (b)


async def buffered_run(
    subjects: list[Subject], cfg: Config, progress: Callable[[str], None]
) -> Result:
    """(b) One session, a 5-turn tool-using run: ours commits once; the SDK's sessions
    write every turn (as they must); floors write the run in one transaction."""
    source = TurnSource(seed=1)
    out: Result = {s.key: {**_entry(s), "rounds": []} for s in subjects}
    for r in range(cfg.b_rounds):
        for subject in _rotate(subjects, r + 1):
            sid = f"b-{r}"
            await subject.run(sid, [source.next() for _ in range(5)])  # warm-up
            gc.collect()
            start = time.perf_counter()
            for _ in range(cfg.b_runs):
                turns = [source.next() for _ in range(5)]
                await subject.run(sid, turns)
            elapsed = time.perf_counter() - start
            out[subject.key]["rounds"].append(cfg.b_runs / elapsed)
            ok = await _verify(subject, sid, (1 + cfg.b_runs) * 20, turns[-1])
            out[subject.key]["verified"] = out[subject.key].get("verified", True) and ok
        progress(f"  (b) round {r + 1}/{cfg.b_rounds} done")
    for entry in out.values():
        entry["runs_per_s"] = statistics.median(entry["rounds"])
        entry["turns_per_s"] = entry["runs_per_s"] * 5
    return out


# ----------------------------------------------------------------------------- (c)


def level_turns(cfg: Config, backend: str, level: int) -> int:
    """Timed turns per round at ``level`` sessions on ``backend``."""
    return cfg.c_turns_pg.get(level, cfg.c_turns) if backend == "postgres" else cfg.c_turns


async def _one_level(subject: Subject, level: int, cfg: Config, tag: str = "") -> Result:
    source = TurnSource(seed=level)
    per_session = max(2, math.ceil(level_turns(cfg, subject.backend, level) / level))
    sids = [f"c{level}{tag}-{i}" for i in range(level)]
    errors: list[str] = []
    ok = 0

    async def warm(sid: str) -> None:
        try:
            await subject.turn(sid, source.next())
        except Exception as exc:  # noqa: BLE001 - counted
            errors.append(f"warm-up: {type(exc).__name__}: {exc}")

    await asyncio.gather(*(warm(sid) for sid in sids))
    warm_errors = len(errors)
    gc.collect()

    async def worker(sid: str) -> None:
        nonlocal ok
        for _ in range(per_session):
            items = source.next()
            try:
                await subject.turn(sid, items)
            except Exception as exc:  # noqa: BLE001 - counted
                errors.append(f"{type(exc).__name__}: {exc}")
            else:
                ok += 1

    start = time.perf_counter()
    timed_out = False
    tasks = [asyncio.ensure_future(worker(sid)) for sid in sids]
    done, pending = await asyncio.wait(tasks, timeout=cfg.c_timeout)
    if pending:
        timed_out = True
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
    elapsed = time.perf_counter() - start
    for task in done:
        if not task.cancelled() and task.exception() is not None:
            errors.append(repr(task.exception()))
    # Warm-up included: how many transactions stored these sessions' commits.
    counted = await subject.transactions(sids)
    kinds: dict[str, int] = {}
    for message in errors:
        kinds[message[:160]] = kinds.get(message[:160], 0) + 1
    return {
        "sessions": level,
        "turns": ok,
        "attempted": level * per_session,
        "seconds": elapsed,
        "turns_per_s": ok / elapsed if elapsed > 0 else math.nan,
        "errors": len(errors),
        "warmup_errors": warm_errors,
        "error_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:5]),
        "timed_out": timed_out,
        "batches": None if counted is None else counted[0],
        "transactions": None if counted is None else counted[1],
    }


def _merge_rounds(cells: list[Result]) -> Result:
    """Median throughput over rounds; errors and turns summed."""
    rates = [c["turns_per_s"] for c in cells]
    kinds: dict[str, int] = {}
    for cell in cells:
        for kind, n in cell["error_kinds"].items():
            kinds[kind] = kinds.get(kind, 0) + n
    return {
        "sessions": cells[0]["sessions"],
        "turns_per_s": statistics.median(rates),
        "rounds": rates,
        "turns": sum(c["turns"] for c in cells),
        "attempted": sum(c["attempted"] for c in cells),
        "seconds": sum(c["seconds"] for c in cells),
        "errors": sum(c["errors"] for c in cells),
        "warmup_errors": sum(c["warmup_errors"] for c in cells),
        "error_kinds": dict(sorted(kinds.items(), key=lambda kv: -kv[1])[:5]),
        "timed_out": any(c["timed_out"] for c in cells),
        "batches": _sum_or_none(c.get("batches") for c in cells),
        "transactions": _sum_or_none(c.get("transactions") for c in cells),
    }


def _sum_or_none(values: Any) -> int | None:
    found = list(values)
    if not found or any(v is None for v in found):
        return None
    return int(sum(found))


async def concurrency(
    make: Callable[[], list[Subject]],
    cfg: Config,
    progress: Callable[[str], None],
    record: Callable[[list[Subject]], Awaitable[None]] | None = None,
) -> Result:
    """(c) ``level`` sessions written at once, each turn its own commit.

    Subjects are opened one at a time (so PostgreSQL subjects each get the same pool
    size and never compete for server connections). Each level runs ``c_rounds``
    rounds, the subjects' order rotating; the median round is reported.
    """
    out: Result = {}
    for i, level in enumerate(cfg.concurrency):
        cells: dict[str, list[Result]] = {}
        skipped: set[str] = set()
        for r in range(cfg.c_rounds):
            for subject in _rotate(make(), i + r):
                entry = out.setdefault(subject.key, {**_entry(subject), "levels": {}})
                if subject.key in skipped:
                    continue
                done = [v for v in entry["levels"].values() if v.get("turns_per_s")]
                if done and r == 0:
                    # warm-up (a turn per session) + timed turns, at the last rate seen
                    rate = done[-1]["turns_per_s"]
                    turns = level_turns(cfg, subject.backend, level)
                    projected = (level + max(turns, 2 * level)) / rate
                    if projected > cfg.c_timeout:
                        skipped.add(subject.key)
                        entry["levels"][str(level)] = {
                            "skipped": f"projected {projected:.0f} s per round at its "
                            f"x{done[-1]['sessions']} rate (> {cfg.c_timeout:.0f} s budget)"
                        }
                        progress(f"  (c) {subject.key:<24} x{level:<4} skipped")
                        continue
                opened, failed = await open_all([subject])
                if failed:
                    skipped.add(subject.key)
                    entry["levels"][str(level)] = {"error": failed[subject.key]}
                    continue
                try:
                    cell = await _one_level(subject, level, cfg, tag=f"r{r}")
                    if record is not None:
                        await record(opened)
                finally:
                    await close_all(opened)
                cells.setdefault(subject.key, []).append(cell)
                progress(
                    f"  (c) {subject.key:<24} x{level:<4} round {r + 1}: "
                    f"{cell['turns_per_s']:8.1f} turns/s  errors={cell['errors']}"
                    f"{'  TIMED OUT' if cell['timed_out'] else ''}"
                )
        for key, found in cells.items():
            out[key]["levels"][str(level)] = _merge_rounds(found)
    return out


# ----------------------------------------------------------------------------- (d)


async def _time_reads(
    subject: Subject, sids: list[str], limit: int | None, reps: int
) -> list[float]:
    """Seconds of ``reps`` reads spread over ``sids`` (after one untimed read each)."""
    for sid in sids:
        await subject.read(sid, limit)
    times: list[float] = []
    for i in range(reps):
        sid = sids[i % len(sids)]
        t0 = time.perf_counter()
        await subject.read(sid, limit)
        times.append(time.perf_counter() - t0)
    return times


async def _interleaved_reads(
    subjects: list[Subject], sids: list[str], cfg: Config, full_reps: int, turn: int
) -> dict[str, tuple[float, float]]:
    """Median ``(limit=20, full)`` read seconds per subject. The reads are split into
    ``cfg.read_rounds`` rounds, subjects taking turns (order rotating), so that a
    noisy moment on the machine lands on every subject rather than on one."""
    rounds = max(1, cfg.read_rounds)
    samples: dict[str, tuple[list[float], list[float]]] = {s.key: ([], []) for s in subjects}
    for r in range(rounds):
        for subject in _rotate(subjects, turn + r):
            gc.collect()
            limit_s, full_s = samples[subject.key]
            limit_s += await _time_reads(
                subject, sids, 20, max(1, math.ceil(cfg.read_reps_limit / rounds))
            )
            full_s += await _time_reads(subject, sids, None, max(1, math.ceil(full_reps / rounds)))
    return {
        key: (statistics.median(limit_s), statistics.median(full_s))
        for key, (limit_s, full_s) in samples.items()
    }


#: Items per turn of the session the turn operations of (d1) are timed on.
TURN_ITEMS = 20


async def _time_op(reps: int, op: Callable[[int], Awaitable[Any]]) -> float:
    """Median seconds of ``op(i)`` over ``reps`` runs (after one untimed run)."""
    await op(-1)
    times: list[float] = []
    for i in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        await op(i)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def turn_operations(subject: Subject, sid: str, size: int, reps: int) -> Result:
    """(d1) Our turn operations on ``sid`` (``size`` items in turns of
    :data:`TURN_ITEMS`): ``turns()``, ``turns(last=5)``, ``get_items(turns=5)``, a rewind of the newest 2
    turns and its ``undo_rewind()``, ``fork(at_turn=2)`` into fresh ids (deleted
    afterwards, untimed) and ``usage()``. Median milliseconds."""
    store = subject.store  # type: ignore[attr-defined]
    session = store.session(sid)
    try:
        count = len(await session.turns())
        forks: list[str] = []

        async def fork(i: int) -> None:
            forks.append(f"{sid}-fork-{size}-{i + 1}")
            await session.fork(forks[-1], at_turn=2)

        async def rewind(_: int) -> None:
            await session.rewind(to_turn=count - 2)
            await session.undo_rewind()

        turns_s = await _time_op(reps, lambda _: session.turns())
        cell: Result = {
            "turn_count": count,
            "turns_ms": turns_s * 1e3,
            "turns_us_per_turn": turns_s * 1e6 / count,
            "turns_last5_ms": await _time_op(reps, lambda _: session.turns(last=5)) * 1e3,
            "turns5_ms": await _time_op(reps, lambda _: session.get_items(turns=5)) * 1e3,
            "rewind2_undo_ms": await _time_op(reps, rewind) * 1e3,
            "fork2_ms": await _time_op(reps, fork) * 1e3,
            "usage_ms": await _time_op(reps, lambda _: session.usage()) * 1e3,
            "turns5_returned": len(await session.get_items(turns=5)),
            "turns_returned": len(await session.turns()),
            "turns_last5_returned": len(await session.turns(last=5)),
        }
        for fork_id in forks:
            await store.delete_session(fork_id)
        return cell
    finally:
        await session.close()


async def history_growth(
    subjects: list[Subject], cfg: Config, progress: Callable[[str], None]
) -> Result:
    """(d1) ``get_items()`` and ``get_items(limit=20)`` on one session as it grows; for
    our subjects, the turn operations on a second one, grown in turns of
    :data:`TURN_ITEMS` items (:func:`turn_operations`)."""
    source = TurnSource(seed=2)
    turn_source = TurnSource(seed=5)
    out: Result = {s.key: {**_entry(s), "sizes": {}} for s in subjects}
    have = 0
    sid = "history"
    turned = "history-turns"
    for step, size in enumerate(cfg.history):
        add = size - have
        chunk_source = source.items(min(add, 1000))
        for subject in subjects:
            left = add
            while left > 0:
                n = min(left, 1000)
                await subject.bulk(sid, chunk_source[:n])
                left -= n
        if any(subject.kind == "ours" for subject in subjects):
            fresh = turn_source.items(add)  # no call or item id repeats in one history
            for subject in subjects:
                if subject.kind == "ours":
                    for start in range(0, add, TURN_ITEMS):
                        await subject.turn(turned, fresh[start : start + TURN_ITEMS])
        have = size
        full_reps = max(cfg.read_rounds, min(30, cfg.read_budget_full // size))
        found = await _interleaved_reads(subjects, [sid], cfg, full_reps, step)
        for subject in subjects:
            limit_s, full_s = found[subject.key]
            out[subject.key]["sizes"][str(size)] = {
                "limit20_ms": limit_s * 1e3,
                "full_ms": full_s * 1e3,
                "full_us_per_item": full_s * 1e6 / size,
                "limit20_returned": len(await subject.read(sid, 20)),
                "full_returned": len(await subject.read(sid, None)),
                "expected_full": size,
            }
            if subject.kind == "ours":
                reps = max(3, cfg.read_reps_limit // 10)
                cell = await turn_operations(subject, turned, size, reps)
                out[subject.key]["sizes"][str(size)]["turn_ops"] = cell
        progress(f"  (d) history {size} items measured")
    return out


async def sessions_growth(
    subjects: list[Subject], cfg: Config, progress: Callable[[str], None]
) -> Result:
    """(d2) ``get_items(limit=20)`` and full reads of 20-item sessions while the
    database grows to many sessions (each new session gets one 4-item turn)."""
    source = TurnSource(seed=3)
    out: Result = {s.key: {**_entry(s), "sizes": {}} for s in subjects}
    have = 0
    probe_sids = [f"probe-{i}" for i in range(5)]
    for subject in subjects:
        for sid in probe_sids:
            await subject.bulk(sid, source.items(20))
    filler = source.next()
    for step, count in enumerate(cfg.sessions):
        new = [f"g-{i:06d}" for i in range(have, count)]
        for subject in subjects:
            t0 = time.perf_counter()
            for i in range(0, len(new), 2000):
                await subject.populate(new[i : i + 2000], filler)
            log.info(
                "populated %d sessions of %s in %.1fs",
                len(new),
                subject.key,
                time.perf_counter() - t0,
            )
        have = count
        found = await _interleaved_reads(subjects, probe_sids, cfg, cfg.read_reps_limit, step)
        for subject in subjects:
            limit_s, full_s = found[subject.key]
            out[subject.key]["sizes"][str(count)] = {
                "limit20_ms": limit_s * 1e3,
                "full_ms": full_s * 1e3,
                "limit20_returned": len(await subject.read(probe_sids[0], 20)),
                "full_returned": len(await subject.read(probe_sids[0], None)),
                "expected_full": 20,
            }
        progress(f"  (d) {count} sessions measured")
    return out
