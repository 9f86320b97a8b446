"""Typed errors of the transaction service (spec §4.5).

Replies that the API carries in a status enum (commit, abort, ping, check state) never raise:
they answer with the enum. The errors below are the cases the API answers with a gRPC status
instead; each carries its ``status_code`` so the servicer maps them with one ``except`` clause:

    except TransactionServiceError as error:
        await context.abort(error.status_code, str(error))
"""

from __future__ import annotations

import grpc

from .errors import ServiceError


class TransactionServiceError(ServiceError):
    """Base class: an operating error answered with the gRPC status ``status_code``."""

    status_code = grpc.StatusCode.INTERNAL


class InvalidTransactionRequest(TransactionServiceError):
    """A request without a stream name or transaction id (final for the Rust client)."""

    status_code = grpc.StatusCode.INVALID_ARGUMENT


class LeaseOutOfRange(TransactionServiceError):
    """createTransaction with a lease outside [lease_ms_min, lease_ms_max].

    Java answers UNKNOWN (retried by Rust for about a minute); spec §8 item 9 prefers a final
    status for malformed requests, so this is INVALID_ARGUMENT.
    """

    status_code = grpc.StatusCode.INVALID_ARGUMENT


class StreamNotFound(TransactionServiceError):
    status_code = grpc.StatusCode.NOT_FOUND


class StreamNotWritable(TransactionServiceError):
    """The stream is CREATING, SEALING or SEALED: Java's illegal-state case, answered INTERNAL."""

    status_code = grpc.StatusCode.INTERNAL


class TransactionContention(TransactionServiceError):
    """A transaction record kept changing under one RPC (FAILED_PRECONDITION: the client retries)."""

    status_code = grpc.StatusCode.FAILED_PRECONDITION


class StreamBusy(Exception):
    """The commit job cannot take the stream now (another workflow holds it); retried later.

    Internal to the commit job: never reaches a client.
    """


class StreamUncommittable(Exception):
    """The stream is SEALED with transactions still COMMITTING: their parents cannot take data.

    Internal to the commit job: the transactions stay COMMITTING and the job is retried at the
    next sweep (a seal workflow should let committing transactions finish first, spec §6.2).
    """
