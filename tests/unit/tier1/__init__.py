"""Tier-1 durable log tests."""
