"""Tributary controller: Pravega-compatible Controller service."""
