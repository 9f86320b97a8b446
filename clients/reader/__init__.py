"""Readers: reader groups (shared state, membership, checkpoints), event readers and segment readers."""
