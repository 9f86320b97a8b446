"""``tributary status --health HOST:PORT``: what each process's operations port says (docs/operations.md).

Asks ``/health/live`` and ``/health/ready`` of every given port (a process's ``--metrics-port``) and
prints one line per process; the exit status is 0 when every process is ready, 1 when one is live but
not ready (a segment store recovering containers, a controller starting), 2 when one cannot be reached.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterable

import aiohttp

READY, NOT_READY, UNREACHABLE = 0, 1, 2


async def probe(address: str, timeout: float = 5.0) -> dict:
    """{"address", "process", "live", "ready"} of the process whose operations port is ``address``, or
    {"address", "error"} when it cannot be asked."""
    base = address if "://" in address else f"http://{address}"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(f"{base}/health/live") as live:
                live_body = await live.json(content_type=None)
            async with session.get(f"{base}/health/ready") as ready:
                ready_body = await ready.json(content_type=None)
    except (TimeoutError, aiohttp.ClientError, ValueError, OSError) as error:
        return {"address": address, "error": str(error) or type(error).__name__}
    return {"address": address, "process": live_body.get("process", "?"), "live": live.status == 200,
            "ready": ready.status == 200 and bool(ready_body.get("ready"))}


async def print_health(addresses: Iterable[str], as_json: bool, echo: Callable[[str], None]) -> int:
    results = await asyncio.gather(*(probe(address) for address in addresses))
    if as_json:
        echo(json.dumps({"processes": results}, sort_keys=True))
    else:
        for result in results:
            if "error" in result:
                echo(f"{result['address']}: UNREACHABLE ({result['error']})")
            else:
                state = "live, ready" if result["ready"] else "live, NOT READY" if result["live"] else "NOT LIVE"
                echo(f"{result['process']} at {result['address']}: {state}")
    if any("error" in result or not result["live"] for result in results):
        return UNREACHABLE
    return READY if all(result["ready"] for result in results) else NOT_READY
