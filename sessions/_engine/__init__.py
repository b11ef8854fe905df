"""The commit machinery: the shield, stores, the commit path, group commit, integrity, sessions (docs/architecture.md, "Folders")."""
