"""The controller's Prometheus metrics (docs/operations.md has the list).

Workflows, transactions, scalings and RPCs are counted where they happen (a few per request: no
enable switch needed); the cluster's view (leadership, live controllers, owned buckets) is read at
scrape time by ``ControllerCollector``. Names follow Prometheus conventions
(``tributary_controller_<what>_<unit>``, counters ending in ``_total``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any

import grpc
from prometheus_client import REGISTRY, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric

if TYPE_CHECKING:
    from .cluster.zk import ControllerCluster

_SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

WORKFLOWS = Counter("tributary_controller_workflows", "Stream workflows run, by kind and outcome",
                    ["kind", "outcome"])  # outcome: completed | failed (an operating error) | interrupted
WORKFLOW_SECONDS = Histogram("tributary_controller_workflow_seconds", "Duration of a stream workflow, by kind",
                             ["kind"], buckets=_SECONDS)
TRANSACTIONS = Counter("tributary_controller_transactions", "Transactions created, committed and aborted",
                       ["event"])  # created | committed | aborted
for _event in ("created", "committed", "aborted"):
    TRANSACTIONS.labels(_event)  # every series exists from the start (a rate over a missing series is empty)
SCALES = Counter("tributary_controller_scales", "Scalings completed (a new epoch), manual or automatic")
RETENTION_TRUNCATIONS = Counter("tributary_controller_retention_truncations",
                                "Streams truncated by their retention policy")
LOAD_REPORTS = Counter("tributary_controller_load_reports", "Segment-store load reports read, by direction",
                       ["direction"])  # up (hot) | down (cold)
for _direction in ("up", "down"):
    LOAD_REPORTS.labels(_direction)
WATERMARKS = Counter("tributary_controller_watermarks", "Watermarks appended to mark streams")
RPCS = Counter("tributary_controller_rpcs", "Controller API calls, by method and gRPC status code",
               ["method", "code"])
RPC_SECONDS = Histogram("tributary_controller_rpc_seconds", "Duration of a Controller API call, by method",
                        ["method"], buckets=_SECONDS)


def measured(rpc: str, handle: Callable[[Any, Any], Awaitable[Any]]) -> Callable[[Any, Any], Awaitable[Any]]:
    """``handle`` (an async gRPC method handler) counted in RPCS by its status code, and timed."""
    seconds = RPC_SECONDS.labels(rpc)

    async def measured_handle(request: Any, context: Any) -> Any:
        started, code = time.perf_counter(), "UNKNOWN"
        try:
            reply = await handle(request, context)
            code = "OK"
            return reply
        except grpc.aio.AbortError:
            code = context.code().name if context.code() is not None else "UNKNOWN"
            raise
        finally:
            RPCS.labels(rpc, code).inc()
            seconds.observe(time.perf_counter() - started)

    return measured_handle


class ControllerCollector:
    """A clustered controller's view of the cluster, at each scrape."""

    def __init__(self, cluster: ControllerCluster):
        self._cluster = cluster

    def collect(self) -> Iterator[Metric]:
        cluster = self._cluster
        yield GaugeMetricFamily("tributary_controller_leader", "1 if this controller leads the cluster",
                                value=1 if cluster.is_leader else 0)
        yield GaugeMetricFamily("tributary_controller_live_controllers", "Controllers registered in the cluster",
                                value=len(cluster.controllers))
        yield GaugeMetricFamily("tributary_controller_owned_buckets", "Stream buckets this controller owns",
                                value=len(cluster.bucket_mapping().get(cluster.controller_id, [])))
        yield GaugeMetricFamily("tributary_controller_segment_stores", "Segment stores registered in the cluster",
                                value=len(cluster.segment_stores))


def register_cluster(cluster: ControllerCluster) -> None:
    REGISTRY.register(ControllerCollector(cluster))
