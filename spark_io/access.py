"""How Spark's processes reach and authenticate to a Tributary (or Pravega) server: the options
``controller``, ``username`` with one of ``password_file``, ``password_env`` or ``password``, and
``trust_store``, checked on the driver when the query is planned.

A :class:`ServerAccess` travels to every executor inside the input partitions and writer objects
that Spark pickles. It carries where the password is, not the password itself, unless the query
gave it as ``password`` (then it is in the options Spark holds anyway; Spark's plan and UI redact
option values whose names contain "password", and this module's ``repr`` never shows it). Each
process reads the password when it opens its client: from a file at the same path on every machine
(``password_file``, say a mounted Kubernetes secret) or from an environment variable that every
executor has (``password_env``). The secret then lives only in that process's memory.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import socket
from collections.abc import Mapping

from clients.config import ClientConfig
from clients.controller_endpoints import parse_controller_uris
from clients.errors import InvalidArgument

DEFAULT_CONTROLLER = "tcp://127.0.0.1:9090"
_PASSWORD_SOURCES = ("password_file", "password_env", "password")


@dataclasses.dataclass(frozen=True)
class ServerAccess:
    """A controller URI (one or several, ``tcp://`` or ``tls://``), the credentials' user and where its
    password comes from, and the CA certificates to trust; hashable (the bridge keeps one client per
    access)."""

    controller: str = DEFAULT_CONTROLLER
    username: str | None = None
    password_file: str | None = None
    password_env: str | None = None
    password: str | None = None
    trust_store: str | None = None

    def __repr__(self) -> str:  # defined here, so the dataclass makes none: the password is never shown
        shown = [f"controller={self.controller!r}"]
        if self.username is not None:
            source = (f"password_file={self.password_file!r}" if self.password_file is not None else
                      f"password_env={self.password_env!r}" if self.password_env is not None else "password=***")
            shown += [f"username={self.username!r}", source]
        if self.trust_store is not None:
            shown.append(f"trust_store={self.trust_store!r}")
        return f"ServerAccess({', '.join(shown)})"

    def client_config(self) -> ClientConfig:
        """The SDK's settings for this access, the password read here, in this process.

        Raises:
            ValueError: the password file cannot be read or the variable is unset on this machine
                (the message names the option and the machine, never the secret).
        """
        credentials = None if self.username is None else (self.username, self._password())
        return ClientConfig(credentials=credentials, tls_trust=self.trust_store)

    def _password(self) -> str:
        host = socket.gethostname()
        if self.password_file is not None:
            try:
                text = pathlib.Path(self.password_file).read_text(encoding="utf-8")
            except OSError as error:
                raise ValueError(f"option password_file: cannot read {self.password_file} on {host} "
                                 f"({error.strerror or error})") from None
            return text.rstrip("\r\n")
        if self.password_env is not None:
            value = os.environ.get(self.password_env)
            if value is None:
                raise ValueError(f"option password_env: the environment variable {self.password_env} is not set "
                                 f"on {host} (every executor needs it, e.g. spark.executorEnv.{self.password_env} "
                                 "or the cluster's own environment)")
            return value
        assert self.password is not None  # server_access() gives a username only with a password source
        return self.password


def server_access(options: Mapping[str, str], text) -> ServerAccess:
    """The access the options describe (``text(options, name)``: the option's stripped value or None).

    Raises:
        ValueError: a malformed controller URI, a user without a password source (or the reverse), two
            password sources, or a trust store without TLS; the message names the option.
    """
    controller = text(options, "controller") or DEFAULT_CONTROLLER
    try:
        tls, _ = parse_controller_uris(controller)
    except InvalidArgument as error:
        raise ValueError(f"option controller: {error}") from None
    username = text(options, "username")
    given = [name for name in _PASSWORD_SOURCES if text(options, name) is not None]
    if len(given) > 1:
        raise ValueError(f"options {' and '.join(given)} conflict: give the password one way")
    if username is None and given:
        raise ValueError(f"option {given[0]} needs option username")
    if username is not None and not given:
        raise ValueError("option username needs a password: password_file, password_env or password")
    if username is not None and ":" in username:
        raise ValueError("option username: a user name has no ':'")
    trust = text(options, "trust_store")
    if trust is not None and not tls:
        raise ValueError(f"option trust_store: the controller URI {controller} is not TLS (use tls://host:port)")
    return ServerAccess(controller, username, text(options, "password_file"), text(options, "password_env"),
                        None if username is None or given != ["password"] else options["password"], trust)


__all__ = ["DEFAULT_CONTROLLER", "ServerAccess", "server_access"]
