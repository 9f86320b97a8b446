"""The REST listener: the API (``api.RestApi``) and the web console's static files on one aiohttp site."""

from __future__ import annotations

import pathlib
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from ..security import Security
from .api import RestApi

CONSOLE_DIR = pathlib.Path(__file__).with_name("console")


class RestStartupError(Exception):
    """The REST port could not be bound."""


def console_app() -> web.Application:
    """The console: ``index.html`` and its script, served as they are (no build step)."""
    app = web.Application()

    async def index(_request: web.Request) -> web.FileResponse:
        return web.FileResponse(CONSOLE_DIR / "index.html")

    app.router.add_get("/", index)
    app.router.add_static("/static/", CONSOLE_DIR, show_index=False)
    return app


class RestServer:
    def __init__(self, services, transactions, cluster: Callable[[], Awaitable[dict[str, Any]]], host: str,
                 port: int, security: Security | None = None, ssl_context: ssl.SSLContext | None = None):
        self._api = RestApi(services, transactions, cluster, security)
        self.host = host
        self.port = port
        self._ssl = ssl_context
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Serves; returns the port. Raises RestStartupError."""
        app = self._api.application(console_app())

        async def to_console(_request: web.Request) -> web.Response:
            raise web.HTTPFound("/console/")

        app.router.add_get("/", to_console)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port, reuse_address=True, ssl_context=self._ssl).start()
        except OSError as error:
            await runner.cleanup()
            raise RestStartupError(f"cannot serve REST on {self.host}:{self.port}: {error.strerror or error}") \
                from error
        self._runner = runner
        if runner.addresses:
            self.port = runner.addresses[0][1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
