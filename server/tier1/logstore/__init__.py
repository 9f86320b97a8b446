"""The log store ("bookie") of the replicated Tier-1 log: see docs/replicated-log.md. In progress:
built are the journal (``journal_format``, ``journal``), the wire codec (``protocol``), the server
(``store``) and one ledger's quorum writer and recovery (``ledgers``); ZooKeeper metadata and the
replicated DurableDataLog are not yet."""
