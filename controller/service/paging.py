"""Collecting everything from a paged listing of the metadata store."""

from __future__ import annotations

from typing import Awaitable, Callable, TypeVar

from ..store import MetadataStore, NotFound

Item = TypeVar("Item")
Token = TypeVar("Token", str, bytes)


async def all_pages(list_page: Callable[[Token], Awaitable[tuple[list[Item], Token]]],
                    first: Token = "") -> list[Item]:
    """Calls ``list_page(token)`` from ``first`` (the empty token) until a page is empty (or has no next token)."""
    items, token = [], first
    while True:
        page, token = await list_page(token)
        if not page:
            return items
        items += page
        if not token:
            return items


async def all_streams(store: MetadataStore) -> list[tuple[str, str]]:
    """(scope, stream) of every stream of every scope (a scope deleted meanwhile is skipped)."""
    streams = []
    for scope in await all_pages(store.scopes.list_scopes):
        try:
            names = await all_pages(lambda token: store.scopes.list_streams(scope, token))
        except NotFound:
            continue
        streams += [(scope, name) for name in names]
    return streams
