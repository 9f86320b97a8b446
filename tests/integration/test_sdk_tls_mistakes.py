"""TLS mistakes between the SDK and the controller end within seconds in ControllerTlsMismatch, whose message
says what is wrong (issue 24), instead of 30 s of retries ending in "ipv6:[::1] ... Connection refused":
an untrusted server certificate, tcp:// against a TLS controller, tls:// against a plaintext one. A controller
that is simply down is still retried (tests/integration/test_sdk_bad_use.py)."""

from __future__ import annotations

import time

import pytest

import tributary
from clients.config import ClientConfig
from tests.support.certs import make_certificates
from tests.support.standalone import StandaloneProcess, serve

pytestmark = pytest.mark.process

PROMPT = 5.0  # seconds: the default retry budget is 30 s, so anything under this was not retried


@pytest.fixture(scope="module")
def tls_standalone(tmp_path_factory):
    home = tmp_path_factory.mktemp("sdk-tls-mistakes")
    certificates = make_certificates(home / "certs")
    other = make_certificates(home / "other-ca")  # a CA that did not sign the server's certificate
    standalone = StandaloneProcess(home / "data", log_path=home / "standalone.log", extra_args=[
        "--tls-cert", str(certificates.certificate), "--tls-key", str(certificates.key),
        "--advertise-address", "localhost"]).start(timeout=60)
    yield {"port": standalone.controller_port, "ca": str(certificates.ca), "other_ca": str(other.ca)}
    standalone.remove_data()


@pytest.fixture(scope="module")
def plain_standalone(tmp_path_factory):
    yield from serve(tmp_path_factory, "sdk-tls-mistakes-plain")


async def fails_promptly(uri: str, config: ClientConfig) -> tributary.ControllerTlsMismatch:
    started = time.monotonic()
    async with tributary.connect(uri, config) as client:
        with pytest.raises(tributary.ControllerTlsMismatch) as raised:
            await client.scope_exists("anything")
    assert time.monotonic() - started < PROMPT
    assert isinstance(raised.value, tributary.ControllerUnavailable) and not raised.value.retriable
    return raised.value


async def test_an_untrusted_certificate_is_named_within_seconds(tls_standalone):
    error = await fails_promptly(f"tls://localhost:{tls_standalone['port']}",
                                 ClientConfig(tls_trust=tls_standalone["other_ca"]))
    message = str(error)
    assert "certificate verify failed" in message and "does not trust" in message
    assert tls_standalone["other_ca"] in message and f"localhost:{tls_standalone['port']}" in message
    assert "\n" not in message


async def test_tcp_against_a_tls_controller_says_tls_is_expected(tls_standalone):
    error = await fails_promptly(f"tcp://localhost:{tls_standalone['port']}", ClientConfig())
    assert "expects TLS" in str(error) and f"tls://localhost:{tls_standalone['port']}" in str(error)


async def test_tls_against_a_plaintext_controller_says_it_does_not_serve_tls(tls_standalone, plain_standalone):
    error = await fails_promptly(f"tls://localhost:{plain_standalone.controller_port}",
                                 ClientConfig(tls_trust=tls_standalone["ca"]))
    assert "does not serve TLS" in str(error) and f"tcp://localhost:{plain_standalone.controller_port}" in str(error)


async def test_the_right_trust_and_scheme_still_work(tls_standalone, plain_standalone):
    """The diagnosis never gets in the way of a client that is set up right."""
    async with tributary.connect(f"tls://localhost:{tls_standalone['port']}",
                                 ClientConfig(tls_trust=tls_standalone["ca"])) as client:
        assert await client.scope_exists("missing") is False
    async with tributary.connect(plain_standalone.controller_uri) as client:
        assert await client.scope_exists("missing") is False


async def test_a_trust_file_that_is_not_pem_is_refused_naming_it(tls_standalone, tmp_path):
    garbage = tmp_path / "trust.pem"
    garbage.write_text("not a certificate\n")
    with pytest.raises(tributary.InvalidArgument, match=f"{garbage}: not a PEM file"):
        async with tributary.connect(f"tls://localhost:{tls_standalone['port']}",
                                     ClientConfig(tls_trust=str(garbage))) as client:
            await client.scope_exists("anything")
