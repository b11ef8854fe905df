"""Reliability suite: cancellation sweeps, crashes, lost connections, concurrency,
bad input and memory. Every scenario checks one history invariant
(:mod:`tests.reliability.invariant`). ``python -m tests.reliability.soak`` runs the
same scenarios for longer and writes ``docs/RELIABILITY.md``.
"""
