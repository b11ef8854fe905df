"""The state machine: every public operation as a rule, checked against the model.

Each rule asks the model (:mod:`tests.model.world`) what the call returns or raises,
makes the call on the real objects and compares; after every step the invariants
(:mod:`tests.model.invariants`) read everything back through fresh objects.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from sessions import TurnUsage
from sessions._tools.doctor import check_store
from sessions.errors import SessionError

from . import strategies as gen
from .harness import LAYOUT, POOL, USERS, Harness, Items, object_models, output, skip
from .invariants import Violation, check_read, check_world, expect
from .spec import (
    ANY,
    CALL,
    Item,
    ObjectModel,
    Outcome,
    call_key,
    defects,
    fail,
    ok,
    read_limit,
    read_turns,
    splits_pair,
    view_turns,
)
from .world import World

OBJ = st.integers(0, len(LAYOUT) - 1)
PLAIN = st.sampled_from([i for i, spec in enumerate(LAYOUT) if not spec[2]])


class Boom(Exception):
    """Raised inside a transaction() block."""


class ModelMachine(RuleBasedStateMachine):
    kind = "memory"
    pg_schema: str | None = None

    def __init__(self) -> None:
        super().__init__()
        self.h = Harness(self.kind, self.pg_schema)
        self.world = World(objects=object_models(), track_life=not skip("deletion_life"))
        self.items = Items()
        self.steps = 0

    def teardown(self) -> None:
        self.h.close()

    # ------------------------------------------------------------------ helpers

    def run(self, coro: Awaitable[Any]) -> Any:
        async def wrap() -> Any:
            return await coro

        return self.h.run(wrap())

    def call(self, what: str, outcome: Outcome, coro: Awaitable[Any]) -> Any:
        """Run ``coro``; its value or exception type must be what ``outcome`` says."""
        try:
            value = self.run(coro)
        except Exception as exc:  # noqa: BLE001 - compared with the model
            if not outcome.fails:
                raise Violation(
                    f"{what}: raised {type(exc).__name__}: {exc}; the model says it "
                    f"returns {outcome.value!r}"
                ) from exc
            if not matches(exc, outcome.errors):
                raise Violation(
                    f"{what}: raised {type(exc).__name__}: {exc}; the model says "
                    f"{' or '.join(t.__name__ for t in outcome.errors)}"
                ) from exc
            return None
        if outcome.fails:
            names = " or ".join(t.__name__ for t in outcome.errors)
            raise Violation(f"{what}: returned {value!r}; the model says it raises {names}")
        expect(what, value, outcome.value)
        return value

    def obj(self, index: int) -> tuple[Any, Any]:
        return self.h.objects[index], self.world.objects[index]

    def open_call(self, index: int) -> str | None:
        model = self.world.objects[index]
        view = [i for items, _, _ in view_turns(model, self.world.s(model.sid)) for i in items]
        if view and view[-1].get("type") == CALL:
            return call_key(view[-1])
        return None

    def reader(self, index: int) -> tuple[Any, ObjectModel]:
        """The object to read through: itself, or a fresh one on its store when the read
        would be ambiguous for it (:meth:`ambiguous_read`)."""
        if not self.ambiguous_read(index):
            return self.obj(index)
        model = self.world.objects[index]
        real = self.h.stores[model.store].session(self.h.rid(model.sid))
        return real, ObjectModel(model.sid, model.store)

    def ambiguous_read(self, index: int) -> bool:
        """A read other than get_items() on an object that would adopt a newer life or
        version if it were get_items(): the docs do not say whether it does."""
        model = self.world.objects[index]
        sess = self.world.s(model.sid)
        if model.has_pending():
            return False
        return (sess.exists and model.life != sess.life) or model.version not in (
            sess.version,
            ANY,
        )

    # ------------------------------------------------------------------ staging

    @rule(index=OBJ, units=gen.UNITS)
    def add_items(self, index: int, units: list[str]) -> None:
        self.add(index, self.items.make(units, self.open_call(index)))

    @rule(index=st.sampled_from([i for i, spec in enumerate(LAYOUT) if spec[2]]))
    def autocommit_tool_run(self, index: int) -> None:
        """A run with a tool call as the SDK writes it with autocommit: the input, the
        call, then its output and the answer, three commits (docs/turns.md): three
        turns, the call and its output in two of them."""
        self.add(index, self.items.make(["user"], self.open_call(index)))
        self.add(index, self.items.make(["open"], None))
        self.add(index, self.items.make(["assistant"], self.open_call(index)))

    def add(self, index: int, items: list[Item]) -> None:
        real, model = self.obj(index)
        if model.autocommit and self.avoid(replace(model, staged=[*model.staged, *items])):
            return
        outcome = self.world.add(model, items)
        if model.autocommit:
            model.version = None
        self.call(f"add_items#{index}({items})", outcome, real.add_items(items))
        self.after_autocommit(index, outcome)

    @rule(index=OBJ)
    def pop_item(self, index: int) -> None:
        self.remove(index, "pop_item", self.world.pop, always=True)

    @rule(index=OBJ)
    def clear_session(self, index: int) -> None:
        self.remove(index, "clear_session", self.world.clear, always=False)

    def remove(
        self, index: int, method: str, modelled: Callable[[Any], Outcome], *, always: bool
    ) -> None:
        """``pop_item`` or ``clear_session`` (``method``), judged by ``modelled``. The
        version is unknown (ANY) after it: after a pop ``always``, else with autocommit."""
        real, model = self.obj(index)
        if model.usage is not None:
            return  # what a staged usage becomes when its staged items go: not said
        outcome = modelled(model)
        if always or model.autocommit:
            model.version = ANY
        self.call(f"{method}#{index}", outcome, getattr(real, method)())
        self.after_autocommit(index, outcome)

    def avoid(self, model: ObjectModel) -> bool:
        """Steps left out: a commit whose outcome the docs leave open
        (:meth:`World.unjudgeable`), and known defects being explored around."""
        if self.world.unjudgeable(model):
            return True
        return skip("pending_call_passed") and self.world.passes_pending_call(model)

    def known_fork_defect(self, model: ObjectModel, dst: str, at: int | None) -> bool:
        turns, target = self.world.s(model.sid).turns, self.world.s(dst)
        n = len(turns) if at is None else at
        if skip("fork_pairs") and splits_pair(turns[:n], turns[n:]):
            return True
        fresh = target.fork_of is None and not target.turns and not target.hidden
        return skip("fork_target") and not fresh

    def after_autocommit(self, index: int, outcome: Outcome) -> None:
        real, model = self.obj(index)
        if model.autocommit and outcome.fails:
            self.world.rollback(model)
            self.run(real.rollback())

    @rule(index=OBJ)
    def rollback(self, index: int) -> None:
        real, model = self.obj(index)
        self.call(f"rollback#{index}", self.world.rollback(model), real.rollback())

    # ------------------------------------------------------------------ commit

    @rule(index=PLAIN, how=st.sampled_from(["plain", "seen", "stale"]))
    def commit(self, index: int, how: str) -> None:
        real, model = self.obj(index)
        if self.avoid(model):
            return
        expected = None
        if how != "plain" and isinstance(real.version, int):
            expected = real.version - (how == "stale" and real.version > 0)
        outcome = self.world.commit(model, expected)
        self.call(
            f"commit#{index}(expected_version={expected})",
            outcome,
            real.commit(expected_version=expected),
        )

    @rule(index=PLAIN, steps=st.integers(1, 8))
    def cancelled_commit(self, index: int, steps: int) -> None:
        """Cancelled after ``steps`` loop iterations: the commit still reaches its outcome."""
        real, model = self.obj(index)
        if self.avoid(model):
            return
        outcome = self.world.commit(model, None)
        model.version = ANY

        async def go() -> str:
            task = asyncio.ensure_future(real.commit())
            for _ in range(steps):
                await asyncio.sleep(0)
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                return "cancelled"
            except Exception as exc:  # noqa: BLE001 - compared with the model
                if outcome.fails and matches(exc, outcome.errors):
                    return "refused"
                raise Violation(f"cancelled commit#{index}: raised {exc!r}") from exc
            return "refused" if outcome.fails else "applied"

        self.run(go())

    @rule(
        index=PLAIN,
        units=gen.UNITS,
        boom=st.booleans(),
        orphan=st.sampled_from([False, False, False, True]),
    )
    def transaction(self, index: int, units: list[str], boom: bool, orphan: bool) -> None:
        real, model = self.obj(index)
        items = self.items.make(units, self.open_call(index))
        if orphan:  # an output without its call: refused at commit (integrity="reject")
            items.append(output(f"orphan{self.items.n}"))
        if self.avoid(replace(model, staged=[*model.staged, *items])):
            return
        if skip("transaction_refused") and not boom:
            if self.world.refusals(replace(model, staged=[*model.staged, *items]), None):
                return
        self.world.stage_add(model, items)
        if boom:
            self.world.rollback(model)
            outcome = fail(Boom)
        else:
            outcome = self.world.commit(model, None)
            if outcome.fails:
                self.world.rollback(model)  # D5: a refused batch is rolled back too

        async def body() -> None:
            async with real.transaction():
                await real.add_items(items)
                if boom:
                    raise Boom()

        self.call(f"transaction#{index}({items}, boom={boom})", outcome, body())
        if not outcome.fails:
            model.version = None

    # ------------------------------------------------------------------ reads

    @rule(index=OBJ, how=st.sampled_from(["all", "limit", "turns"]), n=st.integers(-1, 6))
    def get_items(self, index: int, how: str, n: int) -> None:
        """``n`` -1: as many as start the window right after a tool call's turn."""
        real, model = self.obj(index)
        sess = self.world.s(model.sid)
        if n < 0:
            turns = sess.turns
            n = len(turns) - (cut_point(turns) or 0)
        if how == "turns":
            real, model = self.reader(index)
            want = read_turns(model, sess, n)
            if skip("turns_orphans") and orphan_cut(model, sess, n):
                return
            got = self.run(real.get_items(turns=n))
        elif how == "limit" and n > 0:
            want = read_limit(model, sess, n)
            life = model.life
            self.world.read(model)
            if n <= len(model.staged):  # answered from staging: stored history goes unread
                model.version, model.life = ANY, life
            got = self.run(real.get_items(n))
        else:
            want = self.world.read(model)
            got = self.run(real.get_items())
        if not defects(want):  # staged items another writer's pending call now precedes
            check_read(f"get_items#{index}({how}, {n})", got)  # are the model's, not a read's
        expect(f"get_items#{index}({how}, {n})", got, want)
        if how != "turns" and model.version is not ANY:
            expect(f"version#{index} after get_items", real.version, model.version)

    @rule(index=OBJ, last=st.none() | st.integers(min_value=0, max_value=6))
    def turns(self, index: int, last: int | None) -> None:
        """``turns()``, or ``turns(last=n)``: the newest ``n`` of them."""
        real, model = self.reader(index)
        # The pending turn's run id is not said (it is recorded at commit): not compared.
        got = [
            (t.number, t.items, t.pending, None if t.pending else t.run_id)
            for t in self.run(real.turns(last=last))
        ]
        want = [
            (n, len(items), pending, None if pending else run_id)
            for n, (items, pending, run_id) in enumerate(
                view_turns(model, self.world.s(model.sid)), 1
            )
        ]
        if last is not None:
            want = want[-last:] if last else []
        expect(f"turns(last={last})#{index}", got, want)

    # ------------------------------------------------------------------ turns

    @rule(index=OBJ, dst=st.sampled_from(POOL), at=gen.AT)
    def fork(self, index: int, dst: str, at: int | str | None) -> None:
        """``at`` below 1 counts from the end (-1: the turn before the last); "cut": a
        turn whose end parts a tool call from its output, when there is one."""
        real, model = self.obj(index)
        at = turn_number(self.world.s(model.sid).turns, at)
        if model.has_pending():  # refused first (the order of the checks is not said)
            wrong = dst == model.sid or (at is not None and at < 1)
            outcome = fail(SessionError, ValueError) if wrong else fail(SessionError)
        elif self.known_fork_defect(model, dst, at):
            return
        else:
            outcome = self.world.fork(model, dst, at)
        self.call(
            f"fork#{index}({dst}, at_turn={at})", outcome, real.fork(self.h.rid(dst), at_turn=at)
        )

    @rule(index=PLAIN, to=gen.AT.filter(lambda at: at is not None))
    def rewind(self, index: int, to: int | str) -> None:
        """``to`` as ``at`` of :meth:`fork` (below 0: 0)."""
        real, model = self.obj(index)
        to = max(turn_number(self.world.s(model.sid).turns, to) or 0, 0)
        turns = self.world.s(model.sid).turns
        if skip("rewind_pairs") and splits_pair(turns[:to], turns[to:]):
            return
        outcome = self.world.rewind(model, to)
        self.call(f"rewind#{index}(to_turn={to})", outcome, real.rewind(to))

    @rule(index=PLAIN)
    def undo_rewind(self, index: int) -> None:
        real, model = self.obj(index)
        if skip("undo_nothing_hidden") and not self.world.s(model.sid).hidden:
            return
        outcome = self.world.undo(model)
        self.call(f"undo_rewind#{index}", outcome, real.undo_rewind())

    @rule(index=PLAIN, run_id=gen.RUN_IDS)
    def set_run_id(self, index: int, run_id: Any) -> None:
        real, model = self.obj(index)
        if skip("run_id_text") and isinstance(run_id, str) and not gen.text_ok(run_id):
            return
        if skip("run_id_first_item") and model.staged and model.turn_run_id is None:
            return
        valid = run_id is None or (
            isinstance(run_id, str) and 0 < len(run_id) <= 256 and gen.text_ok(run_id)
        )
        outcome = ok() if valid else fail(ValueError, TypeError)
        self.call(f"set_run_id#{index}({run_id!r})", outcome, self._sync(real.set_run_id, run_id))
        if valid:
            model.run_id = run_id

    @rule(index=PLAIN, usage=gen.USAGES)
    def record_usage(self, index: int, usage: tuple[int, ...]) -> None:
        real, model = self.obj(index)
        valid = all(0 <= v < 2**63 for v in usage)
        if not valid and skip("usage_limits"):
            return
        if valid:
            outcome = self.world.record_usage(model, usage)  # type: ignore[arg-type]
        else:  # which check comes first is not said: both refuse, nothing staged
            refusals = (
                (ValueError, TypeError) if model.staged else (ValueError, TypeError, SessionError)
            )
            outcome = fail(*refusals)
        self.call(
            f"record_usage#{index}({usage})",
            outcome,
            self._sync(real.record_usage, TurnUsage(*usage)),
        )

    async def _sync(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    # ------------------------------------------------------------------ catalogue

    @rule(index=PLAIN, change=gen.INFO_CHANGES)
    def set_info(self, index: int, change: tuple[dict[str, Any], bool]) -> None:
        real, model = self.obj(index)
        fields, valid = change
        if skip("info_limits") and fields in gen.D7_INFO:
            return
        outcome = self.world.set_info(model, fields) if valid else fail(ValueError, TypeError)
        real_fields = dict(fields)
        if isinstance(real_fields.get("user_id"), str) and real_fields["user_id"] in USERS:
            real_fields["user_id"] = self.h.uid(real_fields["user_id"])
        self.call(f"set_info#{index}({fields})", outcome, self._sync(real.set_info, **real_fields))

    @rule(store=st.integers(0, 1), sid=st.sampled_from(POOL))
    def delete_session(self, store: int, sid: str) -> None:
        outcome = ok(self.world.delete(sid))
        self.call(
            f"delete_session({sid})", outcome, self.h.stores[store].delete_session(self.h.rid(sid))
        )

    @rule(store=st.integers(0, 1), user=st.sampled_from(USERS))
    def delete_user(self, store: int, user: str) -> None:
        want = [self.h.rid(s) for s in self.world.delete_user(user)]
        got = self.run(self.h.stores[store].delete_user(self.h.uid(user)))
        expect(f"delete_user({user})", sorted(got), sorted(want))

    @rule(store=st.integers(0, 1), how=st.sampled_from(["ttl", "older_than"]))
    def purge(self, store: int, how: str) -> None:
        if how == "ttl":
            expired = {s for s in POOL if self.world.s(s).info.get("ttl") == gen.TINY}
            got = self.run(self.h.stores[store].purge())
        else:
            expired = set(POOL)
            got = self.run(self.h.stores[store].purge(gen.TINY))
        want = [self.h.rid(s) for s in self.world.purge(expired)]
        mine = sorted(i.session_id for i in got if i.session_id.startswith(self.h.prefix))
        expect(f"purge({how})", mine, sorted(want))

    # ------------------------------------------------------------------ run state

    @rule(
        index=PLAIN,
        what=st.sampled_from(["stage", "discard", "read"]),
        label=st.sampled_from([None, "step"]),
    )
    def run_state(self, index: int, what: str, label: str | None) -> None:
        real, model = self.obj(index)
        if what == "read":
            real, model = self.reader(index)
            text, staged, lab = self.world.run_state_record(model)
            record = self.run(real.run_state_record())
            expect(
                f"run_state_record#{index}",
                (record.text, record.staged, record.label),
                (text, staged, lab),
            )
            return
        text = json.dumps({"state": self.items.n}) if what == "stage" else None
        model.run_state = (text, label if text is not None else None)
        if text is None:
            self._sync_now(real.discard_run_state)
        else:
            self._sync_now(real.stage_run_state, text, label=label)

    def _sync_now(self, fn: Any, *args: Any, **kwargs: Any) -> None:
        self.run(self._sync(fn, *args, **kwargs))

    # ------------------------------------------------------------------ whole store

    @rule(
        store=st.integers(0, 1),
        src=st.sampled_from(POOL),
        dst=st.sampled_from(POOL),
        mode=st.sampled_from(["skip", "append", "replace"]),
    )
    def export_import(self, store: int, src: str, dst: str, mode: str) -> None:
        from .transfer import export_then_import

        export_then_import(self, store, src, dst, mode)

    @rule(store=st.integers(0, 1))
    def doctor_repair(self, store: int) -> None:
        async def go() -> list[Any]:
            return [c async for c in check_store(self.h.stores[store], repair=True)]

        for check in self.run(go()):
            if check.session_id.startswith(self.h.prefix):
                expect(
                    f"doctor of {check.session_id}",
                    [(p.kind, p.call_id) for p in check.problems],
                    [],
                )

    @rule(store=st.integers(0, 1))
    def reopen_store(self, store: int) -> None:
        for i, (s, sid, auto) in enumerate(LAYOUT):
            if s == store:
                self.world.objects[i] = type(self.world.objects[i])(sid, s, autocommit=auto)
        self.run(self.h.reopen(store))

    # ------------------------------------------------------------------ invariants

    @invariant()
    def everything_reads_as_the_model_says(self) -> None:
        self.steps += 1
        self.run(check_world(self.h, self.world, self.steps % 2))


def cut_point(turns: list[Any]) -> int | None:
    """The first turn number whose end parts a tool call from its output."""
    for n in range(1, len(turns)):
        if splits_pair(turns[:n], turns[n:]):
            return n
    return None


def turn_number(turns: list[Any], at: int | str | None) -> int | None:
    if at == "cut":
        return cut_point(turns) or len(turns)
    if isinstance(at, int) and at < 1:
        return len(turns) + at
    return at  # type: ignore[return-value]


def orphan_cut(model: ObjectModel, sess: Any, n: int) -> bool:
    """The last ``n`` turns start with an output whose call is in an earlier turn."""
    turns = view_turns(model, sess)[-n:] if n else []
    window = [i for items, _, _ in turns for i in items]
    return bool(window) and window != read_turns(model, sess, n)


def matches(exc: BaseException, types: tuple[type[BaseException], ...]) -> bool:
    """The exception is of a predicted type: exactly, for our own error classes (a
    subclass means a different refusal), or a subclass of a builtin one."""
    for t in types:
        if type(exc) is t:
            return True
        if t.__module__ == "builtins" and isinstance(exc, t):
            return True
    return False
