"""Model-based test of the whole public API (issue 28): a hypothesis state machine
(``machine.py``) checks every operation against a model written from the docs
(``spec.py``, ``world.py``) on every backend; ``soak.py`` is its long run."""
