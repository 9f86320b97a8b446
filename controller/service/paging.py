"""Collecting every name from a paged listing of the metadata store."""

from __future__ import annotations

from typing import Awaitable, Callable


async def all_pages(list_page: Callable[[str], Awaitable[tuple[list[str], str]]]) -> list[str]:
    """Calls ``list_page(token)`` from the empty token until a page is empty (or has no next token)."""
    names, token = [], ""
    while True:
        page, token = await list_page(token)
        if not page:
            return names
        names += page
        if not token:
            return names
