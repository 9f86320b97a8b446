"""Transactions (spec §4.5, §5.4, §6.5): the ``TransactionService`` and everything behind it.

Modules, dependencies pointing down:

    service        TransactionService: create, ping, commit, abort, state, listing; lease timer, sweeps
    workers        one background worker per stream's commits and per abort, retrying transient failures
    jobs           the commit job (in place or rolling) and the abort job: resumable, idempotent steps
    sealing        what sealing a stream needs: abort the open transactions, wait for the rest
    segments       the transaction segments on the segment stores: names, create, merge, delete
    stream_index   the global index of streams with transactions, and each one's commit order
    ids            transaction ids: epoch on top, a cluster-wide counter below, reserved in blocks
    rules          settings and pure rules: leases, timeouts, ping answers, commit batches
"""

from .rules import PingStatus, TransactionSettings
from .service import CreatedTransaction, TransactionSegment, TransactionService

__all__ = ["CreatedTransaction", "PingStatus", "TransactionSegment", "TransactionService", "TransactionSettings"]
