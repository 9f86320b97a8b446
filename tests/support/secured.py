"""A standalone with authentication and TLS on: users written with `tributary passwd`, a token key file,
a test CA's certificate (tests/support/certs.py)."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.support.certs import make_certificates
from tests.support.standalone import StandaloneProcess


def start_secured_standalone(home, users: dict[str, tuple[str, str]], extra_args: list[str] = ()):
    """Starts a standalone in ``home`` serving TLS, with ``users`` (name -> (password, ACL text)).

    Returns (the started StandaloneProcess, its certificates, the token key file)."""
    certificates = make_certificates(home / "certs")
    passwords = home / "passwd"
    for user, (password, acl) in users.items():
        subprocess.run([sys.executable, "-m", "tributary", "passwd", str(passwords), user, "--acl", acl,
                        "--password-stdin"], input=password + "\n", text=True, check=True, capture_output=True)
    key_file = home / "token.key"
    key_file.write_bytes(os.urandom(32).hex().encode())
    standalone = StandaloneProcess(home / "data", log_path=home / "standalone.log", extra_args=[
        "--password-file", str(passwords), "--token-key-file", str(key_file), "--tls-cert",
        str(certificates.certificate), "--tls-key", str(certificates.key), "--tls-trust", str(certificates.ca),
        "--advertise-address", "localhost", *extra_args]).start(timeout=60)
    return standalone, certificates, key_file
