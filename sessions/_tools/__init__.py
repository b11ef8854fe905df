"""What moves and checks data: export/import, migration, URLs, the doctor, the demo (docs/architecture.md, "Folders")."""
