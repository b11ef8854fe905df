"""The saved run state of :class:`~sessions.BufferedSession` (``docs/approvals.md``):
staged with the next commit, read back with its version.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..._model.backend import RunStateBackend
from ..._model.validate import check_text
from ...errors import SessionError
from ..sdk import run_state_from_text, serialize_run_state
from .plumbing import SessionPlumbing

__all__ = ["RunStatePart", "RunStateRecord"]


@dataclass(frozen=True, slots=True)
class RunStateRecord:
    """A session's saved run state, as :meth:`BufferedSession.run_state_record` reads it."""

    text: str | None
    """The serialized ``RunState`` (``state.to_string()``); ``None``: there is none."""
    version: int
    """The stored version: bumped by every commit that writes or removes the state, never
    reused (``0``: none was ever stored). With ``staged`` it is the version the staged
    change replaces."""
    staged: bool
    """``True``: staged by ``stage_run_state()`` / ``discard_run_state()``, not committed."""
    label: str | None = None
    """The ``label`` given to ``stage_run_state()``."""


class RunStatePart(SessionPlumbing):
    """``stage_run_state``, ``discard_run_state``, ``load_run_state``,
    ``run_state_record``."""

    def stage_run_state(self, state: Any, *, label: str | None = None) -> None:
        """Save ``state`` (an agents ``RunState``, or its ``to_string()`` text) with the
        next commit, in the same transaction as the items staged with it.

        ``label``: a short text of yours kept with it (say, which step of your approval
        flow the state is at), read back by :meth:`run_state_record`. The state's text
        and the label must be valid Unicode without NUL (else ``ValueError``, nothing
        staged).

        One state per session: it replaces the saved one. Never suspends (unless
        ``autocommit``, where it is committed at once, alone). The commit fails with
        :class:`~sessions.errors.CommitConflictError` (nothing applied) if the saved
        state changed since this session last read it (``load_run_state()``,
        ``run_state_record()``); without such a read the write is unconditional.
        """
        self._check_open("stage_run_state")
        text = check_text(serialize_run_state(state), "the run state's text")
        if label is not None:
            if not isinstance(label, str):
                raise TypeError(f"label must be a str or None, got {type(label).__name__}")
            check_text(label, "label")
        self._stage_run_state_text(text, "stage_run_state", label)

    def discard_run_state(self) -> None:
        """Remove the saved run state with the next commit (when the run completed).

        Checked like :meth:`stage_run_state`. Removing a state that is not there is
        harmless; the version still moves on.
        """
        self._check_open("discard_run_state")
        self._stage_run_state_text(None, "discard_run_state")

    async def load_run_state(self, agent: Any, **from_string_options: Any) -> Any:
        """The saved run state as an agents ``RunState`` (``None`` if there is none).

        ``RunState.from_string(agent, text, **from_string_options)`` on the staged state
        if one is staged, else the stored one. Records the stored version read, which
        the next ``stage_run_state()`` / ``discard_run_state()`` is checked against.
        """
        record = await self.run_state_record()
        if record.text is None:
            return None
        return await run_state_from_text(agent, record.text, from_string_options)

    async def run_state_record(self) -> RunStateRecord:
        """The saved run state's text (``None`` if there is none) and version.

        Reads the staged state if one is staged, else the stored one. Without a staged
        change, records the stored version as the one the next change is checked against
        (as :meth:`load_run_state` does).
        """
        self._check_open("run_state_record")
        async with self._lock:
            await self._settle("run_state_record")
            backend = await self._run_state_backend("run_state_record")
            stored, version, label = await backend.load_run_state(self.session_id)
            staged = self._staging.run_state_view()
            if staged is None:
                self._staging.run_state_version = version
            else:
                base = self._staging.run_state_version
                version = version if base is None else base
        if staged is not None:
            return RunStateRecord(staged[0], version, True, staged[1])
        return RunStateRecord(stored, version, False, label)

    def _stage_run_state_text(
        self, text: str | None, operation: str, label: str | None = None
    ) -> None:
        if self._autocommit:
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: with autocommit the run "
                "state would be committed apart from the items it describes; use a session "
                "without autocommit (and transaction()) for runs that wait for approval"
            )
        store = self.store
        if store is not None and not isinstance(store.backend, RunStateBackend):
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: "
                f"{type(store.backend).__name__} cannot store run states"
            )
        if not self._refuse_late_write(operation, 1):
            self._staging.set_run_state(text, label)

    async def _run_state_backend(self, operation: str) -> RunStateBackend:
        backend = await self._backend(operation)
        if not isinstance(backend, RunStateBackend):
            raise SessionError(
                f"{operation}() on session {self.session_id!r}: "
                f"{type(backend).__name__} cannot store run states"
            )
        return backend
