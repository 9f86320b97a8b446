"""``StreamManager``: scopes, streams, and the factory of writers, readers and byte streams.

Controller refusals raise ValueError, as in the binding; creating what exists returns False and
deleting what does not exist returns False. Like the binding, ``list_stream`` lists the streams'
watermark streams (``_MARK...``) too and returns [] for a scope that does not exist, and updating a
sealed stream returns True (the binding reads the controller's STREAM_SEALED answer as success).

The binding's reader groups are not registered with the controller: they are no streams of their
scope and never keep it from being deleted. Tributary's are (``_RG<group>`` streams), so
``list_stream`` leaves those out, and ``delete_scope`` of a scope that holds nothing but reader groups
deletes them first.

Security as in the binding: a ``tls://`` URI or ``tls_enabled`` means TLS, trusting the CA file
named by the environment variable ``pravega_client_tls_cert_path`` (the system's CAs without it);
``auth_enabled`` sends the credentials of ``pravega_client_auth_method=Basic`` with
``pravega_client_auth_username`` and ``pravega_client_auth_password`` (or
``pravega_client_auth_token``, base64 of ``user:password``).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Awaitable
from typing import TypeVar

from clients.config import ClientConfig
from clients.errors import InvalidArgument, ScopeNotEmpty, ScopeNotFound, StreamSealed, TributaryError
from clients.model import StreamConfiguration

from ._byte_stream import ByteStream
from ._common import check_type, error_text
from ._connection import Connection
from ._policies import StreamRetentionPolicy, StreamScalingPolicy
from ._reader import StreamCuts, StreamReaderGroup, StreamReaderGroupConfig
from ._transactions import StreamTxnWriter
from ._writer import StreamWriter

T = TypeVar("T")

_AUTH = "pravega_client_auth_"
_GROUP_PREFIX = "_RG"  # a reader group's stream: Tributary registers groups with the controller, the binding not
_TLS_TRUST = "pravega_client_tls_cert_path"


def _credentials() -> tuple[str, str] | None:
    """(user, password) from the binding's environment variables (None: none are set)."""
    method = os.environ.get(_AUTH + "method")
    if method is None:
        return None
    if method.lower() != "basic":
        raise ValueError(f"{_AUTH}method {method!r} is not supported here: only Basic")
    user, password = os.environ.get(_AUTH + "username"), os.environ.get(_AUTH + "password")
    if user is not None and password is not None:
        return user, password
    token = os.environ.get(_AUTH + "token")
    if token is not None:
        try:
            user, _, password = base64.b64decode(token, validate=True).decode("utf-8").partition(":")
        except (binascii.Error, UnicodeDecodeError) as error:
            raise ValueError(f"{_AUTH}token is not base64 of user:password") from error
        return user, password
    raise ValueError(f"{_AUTH}method Basic needs {_AUTH}username and {_AUTH}password (or {_AUTH}token)")


def client_settings(controller_uri: str, auth_enabled: bool, tls_enabled: bool) -> tuple[str, ClientConfig]:
    """The SDK's controller URI and client configuration for the binding's constructor arguments."""
    uri = controller_uri
    tls = bool(tls_enabled) or uri.startswith("tls://")
    if tls and uri.startswith(("tcp://", "pravega://")):
        uri = "tls://" + uri.partition("://")[2]
    elif tls and "://" not in uri:
        uri = "tls://" + uri
    try:
        config = ClientConfig(credentials=_credentials() if auth_enabled else None,
                              tls_trust=os.environ.get(_TLS_TRUST) if tls else None)
    except InvalidArgument as error:
        raise ValueError(str(error)) from error
    return uri, config


async def _controller(operation: str, call: Awaitable[T]) -> T:
    """Awaits a controller call; its failure raises ValueError, as in the binding."""
    try:
        return await call
    except TributaryError as error:
        raise ValueError(f"{operation} failed: {error_text(error)}") from error


class StreamManager:
    """A connection to a Pravega-compatible cluster, named by its controller URI, e.g. ``tcp://127.0.0.1:9090``.

    ``disable_cert_verification`` is accepted but has no effect: certificates are always verified.
    """

    def __init__(self, controller_uri: str, auth_enabled: bool = False, tls_enabled: bool = False,
                 disable_cert_verification: bool = False):
        check_type(controller_uri, str, "controller_uri")
        self._uri = controller_uri
        uri, self._config = client_settings(controller_uri, auth_enabled, tls_enabled)
        self._disable_cert_verification = bool(disable_cert_verification)
        try:
            self._connection = Connection(uri, self._config)
        except InvalidArgument as error:
            raise ValueError(str(error)) from error

    def _call(self, operation: str, call: Awaitable[T]) -> T:
        return self._connection.call(_controller(operation, call))

    # ------------------------------------------------------------------ scopes

    def create_scope(self, scope_name: str) -> bool:
        """Creates a scope; False if it existed."""
        check_type(scope_name, str, "scope_name")
        return self._call("CreateScope", self._connection.client.create_scope(scope_name))

    def delete_scope(self, scope_name: str) -> bool:
        """Deletes an empty scope; False if it did not exist."""
        check_type(scope_name, str, "scope_name")
        return self._call("DeleteScope", self._delete_scope(scope_name))

    async def _delete_scope(self, scope: str) -> bool:
        client = self._connection.client
        try:
            return await client.delete_scope(scope)
        except ScopeNotEmpty:
            streams = [stream async for stream in client.list_streams(scope, include_internal=True)]
            tables = [table async for table in client.list_key_value_tables(scope)]
            groups = [stream[len(_GROUP_PREFIX):] for stream in streams if stream.startswith(_GROUP_PREFIX)]
            if tables or not groups or len(groups) != len(streams):
                raise
        for group in groups:
            await client.delete_reader_group(scope, group)
        return await client.delete_scope(scope)

    def list_scope(self) -> list[str]:
        """The names of every scope."""
        return self._call("ListScopes", _collect(self._connection.client.list_scopes()))

    def list_stream(self, scope_name: str) -> list[str]:
        """The names of every stream of ``scope_name`` (internal ones too); [] for an unknown scope."""
        check_type(scope_name, str, "scope_name")
        return self._connection.call(self._list_streams(scope_name))

    async def _list_streams(self, scope: str) -> list[str]:
        try:
            streams = await _controller("ListStreams", _collect(
                self._connection.client.list_streams(scope, include_internal=True)))
            return [stream for stream in streams if not stream.startswith(_GROUP_PREFIX)]
        except ValueError as error:
            if isinstance(error.__cause__, (ScopeNotFound, InvalidArgument)):
                return []
            raise

    # ------------------------------------------------------------------ streams

    def create_stream_with_policy(self, scope_name: str, stream_name: str,
                                  scaling_policy: StreamScalingPolicy | None = None,
                                  retention_policy: StreamRetentionPolicy | None = None,
                                  tags: list[str] | None = None) -> bool:
        """Creates a stream (one fixed segment and no retention by default); False if it existed."""
        config = _configuration(scope_name, stream_name, scaling_policy, retention_policy, tags)
        return self._call("CreateStream", self._connection.client.create_stream(scope_name, stream_name, config))

    def create_stream(self, scope_name: str, stream_name: str, initial_segments: int) -> bool:
        """Creates a stream of ``initial_segments`` fixed segments; False if it existed."""
        return self.create_stream_with_policy(scope_name, stream_name,
                                              StreamScalingPolicy.fixed_scaling_policy(initial_segments))

    def update_stream_with_policy(self, scope_name: str, stream_name: str,
                                  scaling_policy: StreamScalingPolicy | None = None,
                                  retention_policy: StreamRetentionPolicy | None = None,
                                  tags: list[str] | None = None) -> bool:
        """Replaces the stream's policies and tags (the defaults: one fixed segment, no retention, no tags)."""
        config = _configuration(scope_name, stream_name, scaling_policy, retention_policy, tags)
        return self._connection.call(self._update(scope_name, stream_name, config))

    async def _update(self, scope: str, stream: str, config: StreamConfiguration) -> bool:
        try:
            await _controller("updateStream", self._connection.client.update_stream(scope, stream, config))
        except ValueError as error:
            if not isinstance(error.__cause__, StreamSealed):
                raise
        return True

    def get_stream_tags(self, scope_name: str, stream_name: str) -> list[str] | None:
        """The stream's tags."""
        check_type(scope_name, str, "scope_name")
        check_type(stream_name, str, "stream_name")
        config = self._call("get_stream_configuration",
                            self._connection.client.get_stream_configuration(scope_name, stream_name))
        return list(config.tags)

    def seal_stream(self, scope_name: str, stream_name: str) -> bool:
        """Seals the stream (again: no error)."""
        check_type(scope_name, str, "scope_name")
        check_type(stream_name, str, "stream_name")
        self._call("SealStream", self._connection.client.seal_stream(scope_name, stream_name))
        return True

    def delete_stream(self, scope_name: str, stream_name: str) -> bool:
        """Deletes a sealed stream; False if it did not exist."""
        check_type(scope_name, str, "scope_name")
        check_type(stream_name, str, "stream_name")
        return self._call("DeleteStream", self._connection.client.delete_stream(scope_name, stream_name))

    # ------------------------------------------------------------------ writers

    def create_writer(self, scope_name: str, stream_name: str, max_inflight_events: int = 0) -> StreamWriter:
        """An event writer of the stream; each write waits until at most ``max_inflight_events`` are in flight."""
        check_type(scope_name, str, "scope_name")
        check_type(stream_name, str, "stream_name")
        return StreamWriter._make(self._connection, scope_name, stream_name, max_inflight_events)

    def create_transaction_writer(self, scope_name: str, stream_name: str, writer_id: int) -> StreamTxnWriter:
        """A transactional writer of the stream (``writer_id``: an unsigned int naming the writer)."""
        check_type(scope_name, str, "scope_name")
        check_type(stream_name, str, "stream_name")
        return StreamTxnWriter._make(self._connection, scope_name, stream_name, writer_id)

    # ------------------------------------------------------------------ readers

    def create_reader_group(self, reader_group_name: str, scope_name: str, stream_name: str,
                            read_from_tail: bool = False, stream_cut: StreamCuts | None = None) -> StreamReaderGroup:
        """A reader group (created, or the existing one of that name) over one stream, from its head, its
        tail (``read_from_tail``) or ``stream_cut``."""
        check_type(reader_group_name, str, "reader_group_name")
        config = StreamReaderGroupConfig(bool(read_from_tail), scope_name, stream_name)
        return StreamReaderGroup._make(self._connection, reader_group_name, scope_name, config, stream_cut)

    def create_reader_group_with_config(self, reader_group_name: str, scope_name: str,
                                        rg_config: StreamReaderGroupConfig) -> StreamReaderGroup:
        """A reader group (created, or the existing one of that name) over the streams of ``rg_config``."""
        check_type(reader_group_name, str, "reader_group_name")
        check_type(rg_config, StreamReaderGroupConfig, "rg_config")
        return StreamReaderGroup._make(self._connection, reader_group_name, scope_name, rg_config, None)

    def delete_reader_group(self, reader_group_name: str, scope_name: str) -> None:
        """Deletes the reader group (no error if there is none)."""
        check_type(reader_group_name, str, "reader_group_name")
        check_type(scope_name, str, "scope_name")
        self._call("DeleteReaderGroup", self._connection.client.delete_reader_group(scope_name, reader_group_name))

    # ------------------------------------------------------------------ byte streams

    def create_byte_stream(self, scope_name: str, stream_name: str) -> ByteStream:
        """A file-like reader and writer of a one-segment stream's bytes."""
        check_type(scope_name, str, "scope_name")
        check_type(stream_name, str, "stream_name")
        return ByteStream._make(self._connection, scope_name, stream_name)

    def to_str(self) -> str:
        return f'Controller ip: "{self._uri}" ClientConfig: {self._config!r}'

    def __repr__(self) -> str:
        return f"StreamManager({self.to_str()})"


def _configuration(scope: str, stream: str, scaling: StreamScalingPolicy | None,
                   retention: StreamRetentionPolicy | None, tags: list[str] | None) -> StreamConfiguration:
    check_type(scope, str, "scope_name")
    check_type(stream, str, "stream_name")
    scaling = scaling if scaling is not None else StreamScalingPolicy.fixed_scaling_policy(1)
    retention = retention if retention is not None else StreamRetentionPolicy.none()
    check_type(scaling, StreamScalingPolicy, "scaling_policy")
    check_type(retention, StreamRetentionPolicy, "retention_policy")
    try:
        return StreamConfiguration(scaling._sdk(), retention._sdk(), tags=tuple(tags or ()))
    except InvalidArgument as error:
        raise ValueError(f"invalid stream configuration: {error}") from error


async def _collect(items) -> list[str]:
    return [item async for item in items]
