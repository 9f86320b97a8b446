"""TLS for the segment store's listener (docs/security.md): a server context from a certificate chain and its
private key (PEM files), modern protocol versions only. The files are checked by ``coordination.tls_files``, so a
bad one is refused with one line naming it and what is wrong (OpenSSL alone says ``[SSL] PEM lib``)."""

from __future__ import annotations

import pathlib
import ssl

from coordination.tls_files import TlsFileError, load_server_chain


class TlsConfigurationError(Exception):
    """The certificate or key cannot be loaded; the message names the file and why."""


def server_tls_context(certificate: pathlib.Path | str, key: pathlib.Path | str) -> ssl.SSLContext:
    """Raises TlsConfigurationError."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        load_server_chain(context, certificate, key)
    except TlsFileError as error:
        raise TlsConfigurationError(str(error)) from None
    return context
