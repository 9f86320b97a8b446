"""coordination.tls_files: every kind of bad certificate, key or trust file is one line naming the file and what is
wrong with it (OpenSSL alone says ``[SSL] PEM lib`` for all of them); good files load. Real files, made by
tests/support/certs.py, loaded by the real ssl module."""

from __future__ import annotations

import ssl

import pytest

from tests.support.certs import make_certificates
from coordination.tls_files import TlsFileError, client_context, load_server_chain, load_trust, server_pair


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    home = tmp_path_factory.mktemp("tls-files")
    return make_certificates(home / "ours"), make_certificates(home / "theirs"), home


def server_context() -> ssl.SSLContext:
    return ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)


def refusal(action) -> str:
    with pytest.raises(TlsFileError) as raised:
        action()
    message = str(raised.value)
    assert "\n" not in message and "PEM lib" not in message
    return message


def test_good_files_load(pki):
    ours, _, _ = pki
    chain, key = load_server_chain(server_context(), ours.certificate, ours.key)
    assert chain == ours.certificate.read_bytes() and key == ours.key.read_bytes()
    assert server_pair(ours.certificate, ours.key) == (chain, key)
    assert client_context(ours.ca).cert_store_stats()["x509_ca"] == 1
    load_trust(ssl.create_default_context(), ours.certificate)


def test_a_garbage_certificate_is_not_pem(pki, tmp_path):
    ours, _, _ = pki
    garbage = tmp_path / "cert.pem"
    garbage.write_text("hello\n")
    assert refusal(lambda: server_pair(garbage, ours.key)) == (
        f"TLS certificate {garbage}: not a PEM file (no '-----BEGIN ...-----' block; it is text)")


def test_a_der_certificate_and_an_empty_file_say_so(pki, tmp_path):
    ours, _, _ = pki
    der = tmp_path / "cert.der"
    der.write_bytes(ssl.PEM_cert_to_DER_cert(ours.certificate.read_text()))
    assert "it is binary (DER?)" in refusal(lambda: server_pair(der, ours.key))
    empty = tmp_path / "empty.pem"
    empty.write_bytes(b"")
    assert "it is empty" in refusal(lambda: server_pair(empty, ours.key))


def test_a_key_given_as_the_certificate_has_no_certificate_in_it(pki):
    ours, _, _ = pki
    assert refusal(lambda: server_pair(ours.key, ours.certificate)) == (
        f"TLS certificate {ours.key}: no certificate in it (it holds PRIVATE KEY)")


def test_a_certificate_given_as_the_key_has_no_private_key_in_it(pki):
    ours, _, _ = pki
    assert refusal(lambda: server_pair(ours.certificate, ours.certificate)) == (
        f"TLS private key {ours.certificate}: no private key in it (it holds CERTIFICATE)")


def test_a_corrupt_certificate_block_does_not_parse(pki, tmp_path):
    ours, _, _ = pki
    corrupt = tmp_path / "cert.pem"
    corrupt.write_text("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
    assert refusal(lambda: server_pair(corrupt, ours.key)) == (
        f"TLS certificate {corrupt}: certificate 1 in it does not parse as X.509")
    not_base64 = tmp_path / "b64.pem"
    not_base64.write_text("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n")
    assert "block is not valid base64" in refusal(lambda: server_pair(not_base64, ours.key))


def test_a_corrupt_key_does_not_parse(pki, tmp_path):
    ours, _, _ = pki
    corrupt = tmp_path / "key.pem"
    corrupt.write_text("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")
    assert refusal(lambda: server_pair(ours.certificate, corrupt)) == (
        f"TLS private key {corrupt}: the private key in it does not parse")


def test_an_encrypted_key_is_refused_without_asking_for_a_password(pki, tmp_path):
    ours, _, _ = pki
    encrypted = tmp_path / "key.pem"
    encrypted.write_text("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n")
    assert "is encrypted" in refusal(lambda: server_pair(ours.certificate, encrypted))
    legacy = tmp_path / "legacy.pem"
    legacy.write_text("-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,00\n\n"
                      "AAAA\n-----END RSA PRIVATE KEY-----\n")
    assert "is encrypted" in refusal(lambda: server_pair(ours.certificate, legacy))


def test_a_key_of_another_certificate_does_not_match(pki):
    ours, theirs, _ = pki
    assert refusal(lambda: server_pair(ours.certificate, theirs.key)) == (
        f"TLS private key {theirs.key}: does not match the certificate in {ours.certificate}")


def test_an_unreadable_file_says_why(pki, tmp_path):
    ours, _, _ = pki
    assert refusal(lambda: server_pair(tmp_path / "missing.pem", ours.key)) == (
        f"TLS certificate {tmp_path / 'missing.pem'}: cannot be read (No such file or directory)")
    assert refusal(lambda: server_pair(ours.certificate, tmp_path)) == (
        f"TLS private key {tmp_path}: cannot be read (Is a directory)")


def test_trust_files_are_checked_the_same_way(pki, tmp_path):
    ours, _, _ = pki
    assert refusal(lambda: client_context(ours.key)) == (
        f"trusted certificates {ours.key}: no certificate in it (it holds PRIVATE KEY)")
    garbage = tmp_path / "ca.pem"
    garbage.write_text("hello\n")
    assert "not a PEM file" in refusal(lambda: load_trust(ssl.create_default_context(), garbage))


def test_a_trust_file_replaces_the_system_cas(pki):
    """As ssl.create_default_context(cafile=...) does: only the named CA is trusted."""
    ours, _, _ = pki
    assert client_context(ours.ca).cert_store_stats()["x509"] == 1
