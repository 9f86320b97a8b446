"""The `tributary controller` and `tributary standalone` commands as child processes: they serve
the real gRPC API, stop cleanly on SIGTERM, and exit non-zero with a clear message when a port is
busy, the data dir is unusable or the segment store cannot be reached."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

import grpc
import pytest

from controller_api import controller_pb2 as pb
from controller_api import controller_pb2_grpc as pb_grpc
from tests.support.certs import make_certificates
from tests.support.processes import ServerProcess, free_port
from tests.support.standalone import StandaloneProcess
from tests.support.waiting import eventually_blocking

pytestmark = pytest.mark.process


def tributary(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tributary", *args], capture_output=True, text=True,
                          timeout=timeout)


def create_scope(port: int, scope: str) -> int:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        return pb_grpc.ControllerServiceStub(channel).createScope(pb.ScopeInfo(scope=scope), timeout=10).status


def test_standalone_serves_and_stops_on_sigterm(tmp_path):
    """The controller answers on --controller-port; SIGTERM stops the process with status 0."""
    standalone = StandaloneProcess(tmp_path / "data", log_path=tmp_path / "log").start()
    try:
        assert create_scope(standalone.controller_port, "cli") == pb.CreateScopeStatus.SUCCESS
        assert standalone.terminate() == 0
    finally:
        standalone.remove_data()
    assert "stopped" in (tmp_path / "log").read_text()


def test_the_standalone_banner_gives_the_uri_clients_must_use(tmp_path):
    """With TLS and --advertise-address localhost, the banner names tls://localhost:PORT (it said
    tcp://127.0.0.1:PORT, which a client cannot use), and the REST API's https:// URL."""
    certificates = make_certificates(tmp_path / "certs")
    rest_port = free_port()
    standalone = StandaloneProcess(tmp_path / "data", log_path=tmp_path / "log", extra_args=[
        "--tls-cert", str(certificates.certificate), "--tls-key", str(certificates.key),
        "--advertise-address", "localhost", "--rest-port", str(rest_port)]).start()
    try:
        # the banner comes once the controller serves, after its port opened
        eventually_blocking(lambda: "clients use" in (tmp_path / "log").read_text(), "the banner", timeout=30)
    finally:
        standalone.remove_data()
    banner = (tmp_path / "log").read_text().splitlines()[0]
    assert f"clients use tls://localhost:{standalone.controller_port}" in banner, banner
    assert f"REST API and console at https://localhost:{rest_port}" in banner, banner


def test_controller_command_against_a_segment_store_process(tmp_path):
    """`tributary controller --segment-store HOST:PORT` in front of `tributary segmentstore`."""
    store = ServerProcess("segmentstore", tmp_path / "data", extra_args=["--log-file-size", "16"]).start()
    controller_port = free_port()
    controller = subprocess.Popen([sys.executable, "-m", "tributary", "controller", "--port", str(controller_port),
                                   "--segment-store", f"127.0.0.1:{store.port}", "--containers", "4"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        statuses = []

        def created() -> bool:
            try:
                statuses.append(create_scope(controller_port, "cli"))
            except grpc.RpcError:
                return False
            return True

        eventually_blocking(created, "the controller to serve", timeout=20, interval=0.1)
        assert statuses == [pb.CreateScopeStatus.SUCCESS]
        controller.terminate()
        assert controller.wait(20) == 0
    finally:
        controller.kill()
        store.kill()
        shutil.rmtree(tmp_path / "data", ignore_errors=True)


def test_busy_controller_port_is_a_clear_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = tributary("standalone", "--data-dir", str(tmp_path / "data"), "--port", "0",
                           "--controller-port", str(port), "--log-file-size", "16")
    shutil.rmtree(tmp_path / "data", ignore_errors=True)
    assert result.returncode == 1
    assert f"error: cannot listen on 127.0.0.1:{port}" in result.stderr


def test_busy_segment_store_port_is_a_clear_error(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = tributary("standalone", "--data-dir", str(tmp_path / "data"), "--port", str(port),
                           "--controller-port", "0", "--log-file-size", "16")
    shutil.rmtree(tmp_path / "data", ignore_errors=True)
    assert result.returncode == 1
    assert f"error: cannot listen on 127.0.0.1:{port}" in result.stderr


def test_unusable_data_dir_is_a_clear_error(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    result = tributary("standalone", "--data-dir", str(tmp_path / "file" / "data"), "--port", "0",
                       "--controller-port", "0")
    assert result.returncode == 1
    assert "error: data dir" in result.stderr and "not usable" in result.stderr


def test_controller_without_a_segment_store_gives_up_clearly():
    result = tributary("controller", "--port", "0", "--segment-store", f"127.0.0.1:{free_port()}", "--wait", "0.5")
    assert result.returncode == 1
    assert "error: cannot reach the segment store" in result.stderr


def test_controller_with_another_container_count_than_the_segment_store_is_a_clear_error(tmp_path):
    """`--containers` must match the segment store's: more or fewer is a one-line error, exit status 1."""
    store = ServerProcess("segmentstore", tmp_path / "data", extra_args=["--log-file-size", "16"]).start()
    try:
        for count in ("3", "5"):  # the store runs 4
            result = tributary("controller", "--port", "0", "--segment-store", f"127.0.0.1:{store.port}",
                               "--containers", count, "--wait", "5")
            assert result.returncode == 1, result.stderr
            assert result.stderr.strip().splitlines() == [
                f"error: --containers {count} does not match the segment store at 127.0.0.1:{store.port} "
                "(give both the same count)"], result.stderr
    finally:
        store.kill()
        shutil.rmtree(tmp_path / "data", ignore_errors=True)
