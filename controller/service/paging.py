"""Collecting everything from a paged listing of the metadata store."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, overload

from ..store import MetadataStore, NotFound

Item = TypeVar("Item")
Token = TypeVar("Token", str, bytes)


@overload
async def all_pages(list_page: Callable[[str], Awaitable[tuple[list[Item], str]]]) -> list[Item]: ...


@overload
async def all_pages(list_page: Callable[[Token], Awaitable[tuple[list[Item], Token]]], first: Token) -> list[Item]: ...


async def all_pages(list_page: Callable[[Any], Awaitable[tuple[list[Item], Any]]],
                    first: str | bytes = "") -> list[Item]:
    """Calls ``list_page(token)`` from ``first`` (the empty token) until a page is empty (or has no next token).

    Tokens are strings (the default ``first``) or, given ``first=b""``, bytes.
    """
    items: list[Item] = []
    token = first
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
            names = await all_pages(functools.partial(store.scopes.list_streams, scope))
        except NotFound:
            continue
        streams += [(scope, name) for name in names]
    return streams


async def owned_streams(store: MetadataStore, owns: Callable[[str, str], bool]) -> list[tuple[str, str]]:
    """(scope, stream) of every stream whose periodic work is this controller's (``Coordination.owns``)."""
    return [(scope, stream) for scope, stream in await all_streams(store) if owns(scope, stream)]
