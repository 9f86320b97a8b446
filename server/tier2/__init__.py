"""Tier-2: chunked long-term storage (PDP-34 "Simplified Tier-2", design §5)."""
