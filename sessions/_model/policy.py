"""How commits are retried and bounded: the policy a store hands to its sessions."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "DEFAULT_INTEGRITY",
    "INTEGRITY_MODES",
    "Integrity",
    "validate_integrity",
    "BULK_NAMESPACES",
    "DEFAULT_COMMIT_TIMEOUT",
    "RECORD_MARGIN",
    "RetryPolicy",
    "kept_prefixes",
    "min_record_age",
]

#: Seconds a caller of ``commit()`` (or an autocommit write, or ``close()``) may be held.
DEFAULT_COMMIT_TIMEOUT = 30.0

#: Namespaces of bulk writers' batch ids (``imp``: import, ``mig``: migration, ``doc``:
#: a repair of ``sessions doctor``, ``frk``: a fork; see
#: :func:`sessions._engine.commit.derived_batch_id`). Their records are what make a rerun of a
#: bulk write add nothing, whenever it happens, so pruning never removes them (one
#: record per chunk of up to 500 items, plus a marker per session; one per repaired
#: session; one per forked turn).
BULK_NAMESPACES = ("imp", "mig", "doc", "frk")

#: Seconds added to a store's own retry window when it prunes batch records: the
#: shield's grace, clocks of other writers that run a little behind, a commit that
#: started just before its store computed the cutoff.
RECORD_MARGIN = 300.0


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a commit retries transient failures (lost connection, busy database).

    ``attempts`` counts the first try. Delays grow exponentially from
    ``initial_delay`` up to ``max_delay`` seconds, with jitter.
    """

    attempts: int = 5
    initial_delay: float = 0.05
    max_delay: float = 2.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise TypeError(f"RetryPolicy.attempts must be an int, got {self.attempts!r}")
        if self.attempts < 1:
            raise ValueError(f"RetryPolicy.attempts must be >= 1, got {self.attempts}")
        for name in ("initial_delay", "max_delay"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise ValueError(f"RetryPolicy.{name} must be a number >= 0, got {value!r}")

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        base: float = min(self.max_delay, self.initial_delay * (2.0 ** (attempt - 1)))
        return base * (0.5 + random.random() / 2)

    def window(self) -> float:
        """The longest time all the waits between attempts can take."""
        return sum(
            min(self.max_delay, self.initial_delay * (2.0 ** (attempt - 1)))
            for attempt in range(1, self.attempts)
        )


def min_record_age(policy: RetryPolicy, commit_timeout: float) -> float:
    """The shortest age (seconds) at which a batch record may be pruned.

    A record must outlive every attempt to apply its batch: the retries of one commit
    all happen within ``commit_timeout`` (the bounded shield), and the waits between
    them add up to at most ``policy.window()``; :data:`RECORD_MARGIN` covers the rest.
    """
    return policy.window() + commit_timeout + RECORD_MARGIN


def kept_prefixes() -> tuple[str, ...]:
    """Batch-id prefixes whose records are never pruned (the bulk writers')."""
    return tuple(f"{namespace}-" for namespace in BULK_NAMESPACES)


#: What a commit does with history the Responses API would refuse.
Integrity = Literal["reject", "quarantine", "off"]
INTEGRITY_MODES: tuple[str, ...] = ("reject", "quarantine", "off")
#: The stores' default (``docs/history.md`` says why).
DEFAULT_INTEGRITY: Integrity = "quarantine"


def validate_integrity(value: object, name: str = "integrity") -> Integrity:
    if value == "reject" or value == "quarantine" or value == "off":
        return value
    raise ValueError(f"{name} must be one of 'reject', 'quarantine', 'off', got {value!r}")
