"""The log store ("bookie") of the replicated Tier-1 log: see docs/replicated-log.md. In progress:
only the journal's record format is built so far."""
