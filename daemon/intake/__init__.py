"""What comes in: bulk ingest, re-ingest, engram import, and this peer's own queued entries."""
