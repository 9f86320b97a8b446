"""Key-value table administration on the client: create, delete, list, open.

Mixed into :class:`~clients.client.Client`. Names are checked locally first (a bad name never costs
a round trip); the controller keeps the tables' records and creates and deletes their partitions.
As with streams, creating a table that exists returns False, and deleting one that does not exist
returns False.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from controller_api.key_value_tables import KeyValueTableConfiguration

from ..controller_client import ControllerClient
from ..errors import InvalidArgument
from ..model import check_scope_name, check_user_name
from ..segment_stores import SegmentStores
from .partitions import Partitions
from .table import KeyValueTable

_TABLE_NAME = "key-value table name"


class KeyValueTableManagement:
    """Key-value table administration (mixed into :class:`~clients.client.Client`)."""

    _controller: ControllerClient
    _stores: SegmentStores

    if TYPE_CHECKING:  # provided by the Client this is mixed into

        def _check_open(self) -> None: ...

        def _adopt(self, child: KeyValueTable) -> KeyValueTable: ...

    async def create_key_value_table(self, scope: str, name: str, config: KeyValueTableConfiguration) -> bool:
        """Creates key-value table ``name`` in ``scope`` with its partitions; False if it existed (its
        configuration is then left as it is).

        Raises:
            InvalidArgument: a bad name or configuration (for instance more partitions than the
                controller allows).
            ScopeNotFound: the scope does not exist.
        """
        self._check_open()
        if not isinstance(config, KeyValueTableConfiguration):
            raise InvalidArgument(f"expected a KeyValueTableConfiguration, not {type(config).__name__}")
        return await self._controller.create_key_value_table(check_scope_name(scope),
                                                             check_user_name(name, _TABLE_NAME), config)

    async def delete_key_value_table(self, scope: str, name: str) -> bool:
        """Deletes the table and its partitions (with all their entries); False if it did not exist."""
        self._check_open()
        return await self._controller.delete_key_value_table(check_scope_name(scope),
                                                             check_user_name(name, _TABLE_NAME))

    async def list_key_value_tables(self, scope: str) -> AsyncIterator[str]:
        """The names of the key-value tables of ``scope``, page by page.

        Raises:
            ScopeNotFound: the scope does not exist.
        """
        self._check_open()
        async for name in self._controller.list_key_value_tables(check_scope_name(scope)):
            yield name

    async def key_value_table(self, scope: str, name: str) -> KeyValueTable:
        """Opens an existing key-value table: reads its configuration and partitions from the controller.

        The handle shares the client's segment-store connections; it is closed with the client.

        Raises:
            KeyValueTableNotFound: the table does not exist.
        """
        self._check_open()
        check_scope_name(scope)
        check_user_name(name, _TABLE_NAME)
        config = await self._controller.get_key_value_table_configuration(scope, name)
        ranges = await self._controller.get_key_value_table_partitions(scope, name)
        return self._adopt(KeyValueTable(scope, name, config, Partitions(scope, name, ranges), self._stores.raw))


__all__ = ["KeyValueTableManagement"]
