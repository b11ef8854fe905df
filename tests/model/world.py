"""The model's operations: each predicts an :class:`~tests.model.spec.Outcome` and
changes the model only when the docs say the call applies (pure Python, no I/O)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from sessions import errors

from .spec import (
    ANY,
    ZERO,
    Item,
    ObjectModel,
    Outcome,
    SessionDeletedError,
    SessionModel,
    TurnRec,
    Usage,
    add_usage,
    deep,
    defects,
    fail,
    history_key,
    ok,
    splits_pair,
    stored_view,
    view_items,
)

Conflict = errors.CommitConflictError
Invalid = errors.InvalidHistoryError


@dataclass
class World:
    sessions: dict[str, SessionModel] = field(default_factory=dict)
    objects: list[ObjectModel] = field(default_factory=list)
    seq: int = 0
    gen: int = 0
    #: D4 (a deleted session's objects refuse to write); off only while exploring.
    track_life: bool = True

    def s(self, sid: str) -> SessionModel:
        return self.sessions.setdefault(sid, SessionModel())

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    # ------------------------------------------------------------------ staging

    def stage_add(self, obj: ObjectModel, items: list[Item]) -> None:
        if items and not obj.staged:
            obj.turn_run_id = obj.run_id
        obj.staged.extend(deep(items))

    def add(self, obj: ObjectModel, items: list[Item]) -> Outcome:
        self.stage_add(obj, items)
        if not obj.autocommit or not items:
            return ok()
        return self.commit(obj, None)

    def pop(self, obj: ObjectModel) -> Outcome:
        sess = self.s(obj.sid)
        if obj.autocommit:
            return self._autocommit_pop(obj, sess)
        if obj.staged:
            item = obj.staged.pop()
            if not obj.staged:
                obj.usage = None
            return ok(item)
        if obj.clear:  # nothing stored to pop: nothing is read
            return ok(None)
        self.adopt(obj, sess)  # the pop reads stored items: the life is learned (D4)
        stored = [i for t in stored_view(obj, sess) for i in t.items]
        if not stored:
            return ok(None)
        obj.pops.append(stored[-1])
        return ok(stored[-1])

    def _autocommit_pop(self, obj: ObjectModel, sess: SessionModel) -> Outcome:
        if not obj.clear and not obj.staged:
            self.adopt(obj, sess)  # it reads the item it pops first
        items = sess.items()
        if not items:
            return ok(None)
        obj.pops = [items[-1]]
        result = self.commit(obj, None)
        return ok(items[-1]) if not result.fails else result

    def clear(self, obj: ObjectModel) -> Outcome:
        obj.clear, obj.pops, obj.staged, obj.usage = True, [], [], None
        if obj.autocommit:
            return self.commit(obj, None)
        return ok()

    def rollback(self, obj: ObjectModel) -> Outcome:
        obj.forget()
        return ok()

    def read(self, obj: ObjectModel) -> list[Item]:
        """get_items(): a read of stored history (none while a clear is staged) adopts
        the stored version and the life (D3, D4)."""
        sess = self.s(obj.sid)
        if not obj.clear:
            obj.version = sess.version if sess.version is not None else ANY
            self.adopt(obj, sess)
        return view_items(obj, sess)

    def adopt(self, obj: ObjectModel, sess: SessionModel) -> None:
        """D4: a read of stored history teaches the object the session's present life
        (none: the session does not exist), unless it holds changes made against the
        life it knows. Commits, rewinds and undos teach nothing."""
        if obj.life is None or not obj.has_pending():
            obj.life = sess.life if sess.exists else None

    # ------------------------------------------------------------------ commit

    def stale(self, obj: ObjectModel, sess: SessionModel) -> bool:
        return self.track_life and obj.life is not None and obj.life != sess.life

    def refusals(self, obj: ObjectModel, expected: int | None) -> tuple[type[BaseException], ...]:
        sess = self.s(obj.sid)
        found: list[type[BaseException]] = []
        if self.stale(obj, sess):
            found.append(SessionDeletedError)
        if expected is not None and sess.version is not None and expected != sess.version:
            found.append(errors.CommitVersionConflictError)
        stored = [json.dumps(i, sort_keys=True) for i in sess.items()]
        if any(json.dumps(p, sort_keys=True) not in stored for p in obj.pops):
            found.append(Conflict)
        if obj.run_state is not None and obj.rs_seen is not None and obj.rs_seen != sess.rs_gen:
            found.append(Conflict)
        if self.new_defects(obj) - self.passed_pending_calls(obj):
            found.append(Invalid)
        return tuple(found)

    def new_defects(self, obj: ObjectModel) -> set[tuple[str, str]]:
        """What the object's commit would add to the stored history's defects."""
        sess = self.s(obj.sid)
        return defects(view_items(obj, sess)) - defects(sess.items())

    def passed_pending_calls(self, obj: ObjectModel) -> set[tuple[str, str]]:
        """``missing_output`` of stored calls left pending that the commit goes past:
        docs/history.md, "How a commit is judged": not judged at that later commit (the
        SDK drops calls without outputs when it builds the next input)."""
        sess = self.s(obj.sid)
        stored = {i.get("call_id") for i in sess.items() if i.get("type") == "function_call"}
        return {d for d in self.new_defects(obj) if d[0] == "missing_output" and d[1] in stored}

    def unjudgeable(self, obj: ObjectModel) -> bool:
        """Whether the commit's judgement is not said by the docs: docs/history.md, "How
        a commit is judged", lets a session judge outputs against the end of the history
        it committed itself without reading it, blind to what another store object
        wrote since ("integrity is judged against the history as this process last knew
        it"). So when the session changed since this object's last commit and the commit
        (popping nothing) would add a defect, it may be refused or stored."""
        if obj.pops or obj.clear or obj.seen is None:
            return False
        if obj.seen == history_key(self.s(obj.sid).turns):
            return False
        return bool(self.new_defects(obj) - self.passed_pending_calls(obj))

    def passes_pending_call(self, obj: ObjectModel) -> bool:
        """The commit would add items after a stored call still waiting for its output
        (another writer's pending tool call): stored, not judged (docs/history.md)."""
        return bool(self.passed_pending_calls(obj))

    def commit(self, obj: ObjectModel, expected: int | None) -> Outcome:
        if not obj.has_pending():
            return ok()
        refused = self.refusals(obj, expected)
        if refused:
            return fail(*refused)
        self.apply(obj)
        sess = self.s(obj.sid)
        obj.version = sess.version if expected is not None else None
        return ok()

    def apply(self, obj: ObjectModel) -> None:
        sess = self.s(obj.sid)
        new_turns = stored_view(obj, sess)
        if obj.clear:
            sess.hidden, sess.usage = [], ZERO
        if obj.staged:
            new_turns.append(TurnRec(self.next_seq(), deep(obj.staged), obj.turn_run_id, obj.usage))
            sess.usage = add_usage(sess.usage, obj.usage) or ZERO
        sess.turns = new_turns
        for name, value in obj.info.items():
            sess.info[name] = value
        if obj.run_state is not None:
            text, label = obj.run_state
            sess.run_state = None if text is None else (text, label)
            self.gen += 1
            sess.rs_gen = self.gen
        sess.version = None if sess.version is None else sess.version + 1
        sess.exists = True
        obj.clear, obj.pops, obj.staged, obj.usage, obj.info, obj.run_state = (
            False, [], [], None, {}, None,
        )  # fmt: skip
        obj.rs_seen = None
        obj.seen = history_key(sess.turns)

    def record_usage(self, obj: ObjectModel, usage: Usage) -> Outcome:
        if not obj.staged:
            return fail(errors.SessionError)
        obj.usage = add_usage(obj.usage, usage)
        return ok()

    def run_state_record(self, obj: ObjectModel) -> tuple[str | None, bool, str | None]:
        sess = self.s(obj.sid)
        if obj.run_state is not None:
            return obj.run_state[0], True, obj.run_state[1]
        obj.rs_seen = sess.rs_gen
        stored = sess.run_state
        return (None, False, None) if stored is None else (stored[0], False, stored[1])

    # ------------------------------------------------------------------ rewind / undo

    def rewind(self, obj: ObjectModel, to_turn: int) -> Outcome:
        sess = self.s(obj.sid)
        if obj.has_pending():
            return fail(errors.SessionError)
        turns = sess.turns
        if to_turn > len(turns):
            return fail(ValueError)
        if to_turn == len(turns):
            return ok(0)
        if splits_pair(turns[:to_turn], turns[to_turn:]):
            return fail(ValueError)
        if self.stale(obj, sess):
            return fail(SessionDeletedError)
        sess.hidden.append(turns[to_turn:])
        sess.turns = turns[:to_turn]
        self._bump(obj, sess)
        return ok(len(turns) - to_turn)

    def undo(self, obj: ObjectModel) -> Outcome:
        sess = self.s(obj.sid)
        if obj.has_pending():
            return fail(errors.SessionError)
        if self.stale(obj, sess):
            return fail(SessionDeletedError)
        if not sess.hidden:
            return ok(0)
        back = sess.hidden[-1]
        first = min(t.seq for t in back)
        if any(t.seq > first for t in sess.turns):
            return fail(Conflict)
        sess.hidden.pop()
        sess.turns = sorted(sess.turns + back, key=lambda t: t.seq)
        self._bump(obj, sess)
        return ok(len(back))

    def _bump(self, obj: ObjectModel, sess: SessionModel) -> None:
        sess.version = None if sess.version is None else sess.version + 1
        obj.version = ANY

    # ------------------------------------------------------------------ fork (D1)

    def fork(self, obj: ObjectModel, dst: str, at_turn: int | None) -> Outcome:
        sess, target = self.s(obj.sid), self.s(dst)
        n = len(sess.turns) if at_turn is None else at_turn
        if dst == obj.sid or not 1 <= n <= len(sess.turns):
            return fail(ValueError)
        if splits_pair(sess.turns[:n], sess.turns[n:]):
            return fail(ValueError)
        record = (obj.sid, n, history_key(sess.turns[:n]))
        if target.fork_of is not None:
            if target.fork_of == record and len(target.turns) >= n:
                return ok(n)
            return fail(Conflict)
        if target.turns or target.hidden:
            return fail(Conflict)
        target.turns = [
            TurnRec(self.next_seq(), deep(t.items), t.run_id, None) for t in sess.turns[:n]
        ]
        target.exists, target.version, target.fork_of = True, None, record
        sess.branches.append((dst, n))
        return ok(n)

    # ------------------------------------------------------------------ catalogue

    def set_info(self, obj: ObjectModel, change: dict[str, Any]) -> Outcome:
        obj.info.update(change)
        return ok()

    def delete(self, sid: str) -> bool:
        sess = self.s(sid)
        if not sess.exists:
            return False
        for other in self.sessions.values():
            other.branches = [b for b in other.branches if b[0] != sid]
        for other in self.sessions.values():
            if other.fork_of is not None and other.fork_of[0] == sid:
                other.fork_of = None  # its record is keyed by the source too
        self.sessions[sid] = SessionModel(life=sess.life + 1)
        return True

    def delete_user(self, user_id: str) -> list[str]:
        ids = sorted(
            s for s, m in self.sessions.items() if m.exists and m.info.get("user_id") == user_id
        )
        for sid in ids:
            self.delete(sid)
        return ids

    def purge(self, expired: set[str]) -> list[str]:
        ids = sorted(s for s in expired if self.s(s).exists)
        for sid in ids:
            self.delete(sid)
        return ids

    # ------------------------------------------------------------------ import

    def import_into(self, sid: str, mode: str, items: list[Item], info: dict[str, Any]) -> None:
        sess = self.s(sid)
        if mode == "skip" and sess.exists:
            return
        if mode == "replace":
            self.delete(sid)
            sess = self.s(sid)
        created = not sess.exists
        if items and sess.turns and sess.turns[-1].unrecorded:  # docs/turns.md
            sess.turns[-1] = TurnRec(
                sess.turns[-1].seq, sess.turns[-1].items + deep(items), None, None, True
            )
        elif items:
            sess.turns.append(TurnRec(self.next_seq(), deep(items), None, None, True))
        if created:
            sess.info = dict(info)
        sess.exists, sess.version = True, None
