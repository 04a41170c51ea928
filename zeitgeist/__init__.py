"""The shared append-only log: entry codec, backends, cursors, snapshots, compaction."""
