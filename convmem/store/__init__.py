"""Durability: the data-directory lock, the append-only log and the snapshot file."""
