"""Scopes and listings (spec §4.1, §4.2): create, delete, exists, and paged lists of scopes,
streams and streams carrying a tag.

Listing tokens are the metadata store's resume tokens ("" starts over); a listing ends with an
empty page. The tag listing reads each stream's configuration and keeps scanning pages until it
has a match or the scope is exhausted, because an empty page would end the client's listing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from wire import naming

from ..store import NotEmpty, NotFound, ScopeStore
from .context import ControllerContext
from .errors import InvalidArgument, InvalidName, ScopeNotEmpty, ScopeNotFound


class ScopeContents(Protocol):
    """What another service keeps per scope (key-value tables): is there any, and drop the rest."""

    async def has_tables(self, scope: str) -> bool: ...

    async def forget_scope(self, scope: str) -> None: ...


def checked_name(validate: Callable[..., str], name: str, *args: str) -> str:
    """``validate(name, *args)`` (a ``wire.naming`` rule). Raises InvalidName for a name that breaks it."""
    try:
        return validate(name, *args)
    except naming.InvalidName as error:
        raise InvalidName(str(error)) from None


async def require_open_scope(scopes: ScopeStore, scope: str) -> None:
    """Raises ScopeNotFound if the scope does not exist or is being deleted (sealed)."""
    if not await scopes.scope_exists(scope) or (await scopes.get_scope(scope))[0].sealed:
        raise ScopeNotFound(f"scope {scope!r} does not exist")


class Scopes:
    def __init__(self, context: ControllerContext, contents: ScopeContents):
        self._context = context
        self._store = context.store
        self._contents = contents

    async def create_scope(self, scope: str) -> bool:
        """Creates the scope. Returns False if it exists (or is being deleted recursively).

        Raises:
            InvalidName: the name breaks the scope naming rules (empty included).
        """
        return await self._store.scopes.create_scope(checked_name(naming.validate_scope_name, scope))

    async def scope_exists(self, scope: str) -> bool:
        return await self._store.scopes.scope_exists(scope)

    async def delete_scope(self, scope: str) -> bool:
        """Deletes an empty scope. Returns False if it does not exist.

        Raises:
            ScopeNotEmpty: it still holds streams, reader groups or key-value tables.
        """
        if not await self._store.scopes.scope_exists(scope):
            return False
        if await self._contents.has_tables(scope):
            raise ScopeNotEmpty(f"scope {scope!r} still holds key-value tables")
        try:
            await self._store.scopes.delete_scope(scope)
        except NotEmpty:
            raise ScopeNotEmpty(f"scope {scope!r} is not empty") from None
        except NotFound:
            return False
        await self._contents.forget_scope(scope)
        return True

    async def list_scopes(self, token: str) -> tuple[list[str], str]:
        """One page of scope names and the token of the next page.

        Raises:
            InvalidArgument: the token is not one of ours.
        """
        try:
            return await self._store.scopes.list_scopes(token, self._context.settings.listing_page_max)
        except ValueError as error:
            raise InvalidArgument(str(error)) from None

    async def list_streams(self, scope: str, token: str) -> tuple[list[str], str]:
        """One page of the scope's stream names and the next token.

        Raises:
            ScopeNotFound: no such scope.
            InvalidArgument: the token is not one of ours.
        """
        try:
            return await self._store.scopes.list_streams(scope, token, self._context.settings.listing_page_max)
        except NotFound:
            raise ScopeNotFound(f"scope {scope!r} does not exist") from None
        except ValueError as error:
            raise InvalidArgument(str(error)) from None

    async def list_streams_for_tag(self, scope: str, tag: str, token: str) -> tuple[list[str], str]:
        """The next non-empty page of streams tagged ``tag`` (empty: the listing is over).

        Raises:
            ScopeNotFound: no such scope.
            InvalidArgument: the token is not one of ours.
        """
        while True:
            names, token = await self.list_streams(scope, token)
            if not names:
                return [], ""
            tagged = []
            for name in names:
                try:
                    configuration, _ = await self._store.stream(scope, name).get_configuration()
                except NotFound:  # listed but being created or deleted
                    continue
                if tag in configuration.configuration.tags:
                    tagged.append(name)
            if tagged or not token:
                return tagged, token
