"""Every process's operations endpoint (``--metrics-port``; docs/operations.md), over aiohttp:

* ``GET /metrics``: the process's Prometheus metrics (text exposition format);
* ``GET /health/live``: 200 while the process runs (its event loop answers);
* ``GET /health/ready``: 200 once it serves, 503 before (containers still recovering, the controller
  still starting) and while stopping; the body says which, as JSON.

It starts before the service it reports on, so a probe sees "live, not ready" during recovery.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, disable_created_metrics, generate_latest


class OpsServer:
    def __init__(self, host: str, port: int, process: str, ready: Callable[[], bool]):
        self.host = host
        self.port = port
        self.process = process
        self._ready = ready
        self._runner: web.AppRunner | None = None

    async def start(self) -> int:
        """Starts listening; returns the port. Raises OSError if the port cannot be bound."""
        disable_created_metrics()  # no *_created series: they double the scrape for nothing a dashboard uses
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/health/live", self._live)
        app.router.add_get("/health/ready", self._readiness)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except OSError:
            await runner.cleanup()
            raise
        self._runner = runner
        addresses = runner.addresses  # the bound port when 0 was asked for
        if addresses:
            self.port = addresses[0][1]
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, _request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _live(self, _request: web.Request) -> web.Response:
        return _json(200, {"process": self.process, "live": True})

    async def _readiness(self, _request: web.Request) -> web.Response:
        ready = bool(self._ready())
        return _json(200 if ready else 503, {"process": self.process, "ready": ready})


def _json(status: int, body: dict) -> web.Response:
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")
