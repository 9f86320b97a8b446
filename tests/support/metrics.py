"""Reading a process's operations endpoint (``--metrics-port``) in tests: GET a path, scrape /metrics."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def get(port: int, path: str) -> tuple[int, str]:
    """(HTTP status, body) of ``path`` on the endpoint at 127.0.0.1:``port``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(port: int) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value of every sample the endpoint exposes."""
    status, text = get(port, "/metrics")
    assert status == 200
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)
