"""TLS files (PEM) checked before they are used, so that a bad one is one clear line naming it.

OpenSSL reports every kind of bad certificate or key file as ``[SSL] PEM lib``, and grpcio gives no
better; an operator cannot tell which of ``--tls-cert``, ``--tls-key`` or ``--tls-trust`` is wrong, nor
how. These checks read each file and say what is wrong with it: unreadable, not PEM, no certificate (or
no private key) in it, a block that does not decode, an encrypted key, or a key that does not match the
certificate. The segment store, the controller (gRPC, REST, its trust in segment stores) and the SDK's
trust file all go through here. Only the standard ``ssl`` module parses (``cryptography`` is a test
dependency, not a runtime one).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import ssl

_BLOCK = re.compile(rb"-----BEGIN ([A-Z0-9 ]+)-----(.*?)-----END \1-----", re.S)
_CERTIFICATE_LABELS = (b"CERTIFICATE", b"TRUSTED CERTIFICATE")


class TlsFileError(ValueError):
    """A certificate, key or trust file that cannot be used; the message (one line) names the file and why."""


def _read(path: str | os.PathLike[str], what: str) -> bytes:
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as error:
        raise TlsFileError(f"{what} {path}: cannot be read ({error.strerror or error})") from None


def _blocks(path: str | os.PathLike[str], what: str, data: bytes) -> list[tuple[bytes, bytes]]:
    """The (label, DER bytes) of each PEM block in ``data``."""
    found = _BLOCK.findall(data)
    if not found:
        kind = "binary (DER?)" if data[:1] == b"\x30" else "empty" if not data.strip() else "text"
        raise TlsFileError(f"{what} {path}: not a PEM file (no '-----BEGIN ...-----' block; it is {kind})")
    blocks = []
    for label, body in found:
        lines = [line.strip() for line in body.splitlines()]
        if any(b":" in line for line in lines):  # RFC 1421 headers: a legacy encrypted key
            raise TlsFileError(f"{what} {path}: the {label.decode()} is encrypted (a key protected by a "
                               "password is not supported: decrypt it with `openssl pkey`)")
        try:
            blocks.append((label, base64.b64decode(b"".join(lines), validate=True)))
        except (binascii.Error, ValueError):
            raise TlsFileError(f"{what} {path}: its {label.decode()} block is not valid base64") from None
    return blocks


def _labels(blocks: list[tuple[bytes, bytes]]) -> str:
    return ", ".join(sorted({label.decode() for label, _ in blocks}))


def check_certificates(path: str | os.PathLike[str], what: str = "TLS certificate") -> bytes:
    """The file's bytes, once it holds at least one certificate and every certificate in it parses.

    Raises:
        TlsFileError: naming ``path`` and what is wrong with it.
    """
    data = _read(path, what)
    blocks = _blocks(path, what, data)
    certificates = [der for label, der in blocks if label in _CERTIFICATE_LABELS]
    if not certificates:
        raise TlsFileError(f"{what} {path}: no certificate in it (it holds {_labels(blocks)})")
    for number, der in enumerate(certificates, 1):
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=der)
        except (ssl.SSLError, ValueError):
            raise TlsFileError(f"{what} {path}: certificate {number} in it does not parse as X.509") from None
    return data


def check_private_key(path: str | os.PathLike[str], what: str = "TLS private key") -> bytes:
    """The file's bytes, once it holds an unencrypted private key (whether the key parses and matches its
    certificate is checked by :func:`load_server_chain`).

    Raises:
        TlsFileError: naming ``path`` and what is wrong with it.
    """
    data = _read(path, what)
    blocks = _blocks(path, what, data)
    if any(label == b"ENCRYPTED PRIVATE KEY" for label, _ in blocks):
        raise TlsFileError(f"{what} {path}: the private key is encrypted (a key protected by a password is "
                           "not supported: decrypt it with `openssl pkey`)")
    if not any(label.endswith(b"PRIVATE KEY") for label, _ in blocks):
        raise TlsFileError(f"{what} {path}: no private key in it (it holds {_labels(blocks)})")
    return data


def load_server_chain(context: ssl.SSLContext, certificate: str | os.PathLike[str],
                      key: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """Loads the server's certificate chain and private key into ``context``; returns their PEM bytes.

    Raises:
        TlsFileError: naming the file at fault and what is wrong with it.
    """
    chain = check_certificates(certificate)
    private_key = check_private_key(key)
    try:
        context.load_cert_chain(os.fspath(certificate), os.fspath(key), password=_no_password)
    except ssl.SSLError as error:
        if error.reason == "KEY_VALUES_MISMATCH":
            raise TlsFileError(f"TLS private key {key}: does not match the certificate in {certificate}") from None
        detail = f" ({error.reason})" if error.reason else ""  # OpenSSL's "PEM lib" says nothing more
        raise TlsFileError(f"TLS private key {key}: the private key in it does not parse{detail}") from None
    return chain, private_key


def server_pair(certificate: str | os.PathLike[str], key: str | os.PathLike[str]) -> tuple[bytes, bytes]:
    """(certificate chain, private key) PEM bytes, checked as :func:`load_server_chain` checks them (for grpcio,
    which takes bytes and reports a bad file no better than OpenSSL)."""
    return load_server_chain(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), certificate, key)


def client_context(trust: str | os.PathLike[str] | None) -> ssl.SSLContext:
    """A client context that trusts only the certificates in the PEM file ``trust`` (None: the system's CAs).

    Raises:
        TlsFileError: naming ``trust`` and what is wrong with it.
    """
    if trust is None:
        return ssl.create_default_context()
    check_certificates(trust, "trusted certificates")
    try:
        return ssl.create_default_context(cafile=os.fspath(trust))
    except (ssl.SSLError, OSError) as error:
        raise TlsFileError(f"trusted certificates {trust}: cannot be loaded ({_reason(error)})") from None


def load_trust(context: ssl.SSLContext, trust: str | os.PathLike[str]) -> None:
    """Makes ``context`` trust the certificates in the PEM file ``trust``.

    Raises:
        TlsFileError: naming ``trust`` and what is wrong with it.
    """
    check_certificates(trust, "trusted certificates")
    try:
        context.load_verify_locations(cafile=os.fspath(trust))
    except (ssl.SSLError, OSError) as error:
        raise TlsFileError(f"trusted certificates {trust}: cannot be loaded ({_reason(error)})") from None


def _no_password() -> bytes:
    """Never prompt on a terminal for a key's password (OpenSSL's default); an encrypted key fails instead."""
    return b""


def _reason(error: Exception) -> str:
    """OpenSSL's reason code (``KEY_VALUES_MISMATCH``), or its message without the source location."""
    reason = getattr(error, "reason", None)
    return str(reason) if reason else str(error).split(" (_ssl.c")[0]
