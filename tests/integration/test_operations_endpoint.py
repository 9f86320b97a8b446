"""Every process's operations endpoint (``--metrics-port``): Prometheus metrics that move with the load, and
health probes that say live at once and ready only once the process serves.

* A standalone under `tributary loadgen`: append, read, Tier-1, cache, Tier-2 and controller figures
  move by what the run did; the containers and connections gauges say what runs.
* A clustered segment store whose containers cannot start (no log store yet): live, not ready; ready once a
  log store comes. The log store's own endpoint counts its group commits; the controller's says ready.
"""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
import time

import pytest

from tests.support.cluster import ControllerProcess
from tests.support.metrics import get, scrape, value
from tests.support.processes import ServerProcess, free_port
from tests.support.standalone import StandaloneProcess
from tests.support.waiting import eventually_blocking

pytestmark = pytest.mark.process

DOCS = pathlib.Path(__file__).resolve().parents[2] / "docs"
CLUSTER_ONLY = {"tributary_controller_leader", "tributary_controller_live_controllers",
                "tributary_controller_owned_buckets", "tributary_controller_segment_stores"}


def test_metrics_move_with_a_load_run(tmp_path):
    metrics_port = free_port()
    standalone = StandaloneProcess(tmp_path / "data", extra_args=["--metrics-port", str(metrics_port)]).start()
    try:
        before = scrape(metrics_port)
        output = tmp_path / "load.json"
        subprocess.run([sys.executable, "-m", "tributary", "loadgen", "--controller", standalone.controller_uri,
                        "--writers", "2", "--readers", "1", "--event-size", "512", "--rate", "3000", "--duration",
                        "2", "--output", str(output), "--quiet"], check=True, timeout=120)
        written = json.loads(output.read_text())["totals"]["events_written"]
        after = scrape(metrics_port)

        def grew(name: str, **labels) -> float:
            return value(after, name, **labels) - value(before, name, **labels)

        assert grew("tributary_segmentstore_append_events_total") >= written
        assert grew("tributary_segmentstore_append_bytes_total") >= written * 512
        assert grew("tributary_segmentstore_append_latency_seconds_count") > 0
        assert grew("tributary_segmentstore_read_bytes_total") >= written * 512
        assert grew("tributary_segmentstore_read_latency_seconds_count") > 0
        assert grew("tributary_segmentstore_cache_lookups_total", result="hit") > 0
        assert grew("tributary_tier1_group_commit_bytes_count", log="local") > 0
        assert grew("tributary_tier1_fsync_seconds_sum", log="local") > 0
        assert grew("tributary_controller_workflows_total", kind="create", outcome="completed") >= 1
        assert grew("tributary_controller_rpcs_total", method="createStream", code="OK") >= 1
        assert value(after, "tributary_segmentstore_containers", status="running") == 4
        assert value(after, "tributary_segmentstore_cache_budget_bytes") > 0
        assert value(after, "tributary_segmentstore_writer_attributes") >= 2  # the load run's writers, kept
        for container in "0123":  # every container's recovery is over: all of its (new, empty) log replayed
            assert ("tributary_segmentstore_recovery_records_total", (("container", container),)) in after
            assert value(after, "tributary_segmentstore_recovery_records", container=container) == \
                value(after, "tributary_segmentstore_recovery_records_total", container=container)
            assert value(after, "tributary_segmentstore_recovery_eta_seconds", container=container) == 0
        # the storage writer moves the data to Tier-2 within seconds
        eventually_blocking(lambda: value(scrape(metrics_port), "tributary_tier2_written_bytes_total") >= written * 512,
                            "Tier-2 to receive the data", timeout=30, interval=0.2)
        assert not [name for name, _ in after if name.endswith("_created")]
        assert get(metrics_port, "/health/live")[0] == 200 and get(metrics_port, "/health/ready")[0] == 200
        exposed = {name for name, _ in after} | CLUSTER_ONLY
        for document in (DOCS / "grafana-dashboard.json", DOCS / "operations.md"):
            named = {name for name in re.findall(r"tributary_[a-z0-9_]+", document.read_text())
                     if not name.endswith("_")}  # "..._cache_budget_bytes"-style abbreviations aside
            unknown = {name for name in named if not any(sample.startswith(name) for sample in exposed)}
            assert not unknown, f"{document.name} names metrics no process exposes: {sorted(unknown)}"
    finally:
        standalone.kill()


def health_status(*ports_and_options) -> subprocess.CompletedProcess:
    """``tributary status --health`` of the processes whose operations ports are given."""
    arguments = [item for port in ports_and_options
                 for item in (("--health", f"127.0.0.1:{port}") if isinstance(port, int) else (port,))]
    return subprocess.run([sys.executable, "-m", "tributary", "status", *arguments], capture_output=True, text=True,
                          timeout=60)


def test_live_at_once_ready_once_serving(tmp_path, zk_hosts):
    store_metrics, controller_metrics, logstore_metrics = free_port(), free_port(), free_port()
    store = ServerProcess("segmentstore", tmp_path / "store", log_path=tmp_path / "store.log", extra_args=[
        "--cluster", "--tier1", "replicated", "--zk", zk_hosts, "--log-quorum", "1/1/1", "--containers", "2",
        "--zk-session-timeout", "2", "--metrics-port", str(store_metrics)]).start()
    controller = ControllerProcess(zk_hosts, 2, tmp_path / "controller.log", 2.0, 0.5)
    controller.extra_args = ["--metrics-port", str(controller_metrics)]
    logstore = None
    try:
        controller.start(wait_for_port=False)
        eventually_blocking(lambda: value(scrape(store_metrics), "tributary_segmentstore_containers",
                                          status="recovering") > 0
                            or "starting container" in (tmp_path / "store.log").read_text(),
                            "a container to be assigned", timeout=30, interval=0.2)
        time.sleep(1.0)  # a while with no log store: only time shows the recovery cannot end without one
        assert get(store_metrics, "/health/live")[0] == 200
        status, body = get(store_metrics, "/health/ready")
        assert status == 503 and json.loads(body) == {"process": "segmentstore", "ready": False}
        assert get(controller_metrics, "/health/ready")[0] == 503  # its metadata lives in those containers
        waiting = health_status(store_metrics, controller_metrics)
        assert waiting.returncode == 1, waiting.stdout
        assert f"segmentstore at 127.0.0.1:{store_metrics}: live, NOT READY" in waiting.stdout
        logstore = ServerProcess("logstore", tmp_path / "logstore", log_path=tmp_path / "logstore.log",
                                 extra_args=["--zk", zk_hosts, "--metrics-port", str(logstore_metrics)]).start()
        eventually_blocking(lambda: get(store_metrics, "/health/ready")[0] == 200
                            and get(controller_metrics, "/health/ready")[0] == 200,
                            "the segment store and the controller to become ready", timeout=60, interval=0.2)
        serving = health_status(store_metrics, controller_metrics, logstore_metrics, "--json")
        assert serving.returncode == 0, serving.stdout
        assert sorted((process["process"], process["ready"]) for process in json.loads(serving.stdout)["processes"]) \
            == [("controller", True), ("logstore", True), ("segmentstore", True)]
        samples = scrape(logstore_metrics)
        assert value(samples, "tributary_tier1_group_commit_bytes_count", log="logstore") > 0
        assert get(logstore_metrics, "/health/ready")[0] == 200
        controller_samples = scrape(controller_metrics)
        assert value(controller_samples, "tributary_controller_leader") == 1
        assert value(controller_samples, "tributary_controller_segment_stores") == 1
    finally:
        controller.kill()
        store.kill()
        if logstore is not None:
            logstore.kill()


def test_a_busy_metrics_port_is_a_clear_error(tmp_path):
    standalone = StandaloneProcess(tmp_path / "first").start()
    try:
        result = subprocess.run([sys.executable, "-m", "tributary", "standalone", "--data-dir", str(tmp_path / "b"),
                                 "--port", "0", "--controller-port", "0", "--metrics-port", str(standalone.port)],
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 1 and result.stderr.startswith("error: cannot serve metrics on")
    finally:
        standalone.kill()


def test_status_of_an_unreachable_process_and_bad_options(tmp_path):
    unreachable = health_status(free_port())
    assert unreachable.returncode == 2 and "UNREACHABLE" in unreachable.stdout
    neither = subprocess.run([sys.executable, "-m", "tributary", "status"], capture_output=True, text=True, timeout=60)
    assert neither.returncode == 2 and "either --zk" in neither.stderr
