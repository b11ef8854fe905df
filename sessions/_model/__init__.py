"""The pure model: what history, turns, batches and settings are, and the rules they follow; no I/O (docs/architecture.md, "Folders")."""
