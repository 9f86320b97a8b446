"""Tier-2 chunk storage tests."""
