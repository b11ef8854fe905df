"""The public surface: ``__all__`` is complete, sorted, and every name resolves."""

from __future__ import annotations

import sessions
import sessions.errors


def test_all_is_sorted_and_resolves() -> None:
    assert list(sessions.__all__) == sorted(sessions.__all__)
    for name in sessions.__all__:
        assert getattr(sessions, name) is not None, name


def test_public_names_are_exported() -> None:
    public = {name for name in vars(sessions) if not name.startswith("_")}
    modules = {"errors", "sqlite", "annotations", "importlib", "TYPE_CHECKING", "Any"}
    submodules = {n for n in public if n not in sessions.__all__ and n not in modules}
    # Names that exist only because a submodule was imported are fine; nothing else is.
    assert all(isinstance(getattr(sessions, n), type(sessions)) for n in submodules), submodules


def test_errors_all_is_sorted_and_complete() -> None:
    names = sorted(
        n
        for n, v in vars(sessions.errors).items()
        if isinstance(v, type)
        and issubclass(v, BaseException | Warning)
        and not n.startswith("_")
        and v.__module__ == "sessions.errors"
    )
    assert sorted(sessions.errors.__all__) == list(sessions.errors.__all__) == names
