"""The memory service: a Protocol, an embedded SQLite default and a command backend."""
