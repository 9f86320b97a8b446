"""TLS for the segment store's and the log store's listeners (docs/security.md): a server context from a
certificate chain and its private key (PEM files), modern protocol versions only."""

from __future__ import annotations

import pathlib
import ssl


class TlsConfigurationError(Exception):
    """The certificate or key cannot be loaded."""


def server_tls_context(certificate: pathlib.Path | str, key: pathlib.Path | str) -> ssl.SSLContext:
    """Raises TlsConfigurationError."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(str(certificate), str(key))
    except (OSError, ssl.SSLError) as error:
        raise TlsConfigurationError(f"cannot load the TLS certificate {certificate} and key {key}: {error}") from None
    return context
