"""Segment containers: metadata, operation log, read index, table segments, recovery."""
