"""``tributary admin``: the REST admin API (docs/rest.md) from the command line.

Human-readable tables by default, the API's JSON with ``--json``. Exit status 0 on success, 1 when
the API refuses (the line says its code and message) or cannot be reached, 2 for bad options.
A controller with a password file wants ``--user`` (the password from ``--password-stdin``, or the
``TRIBUTARY_PASSWORD`` environment variable); an ``https://`` API with a private CA wants ``--tls-trust``.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import click

from controller_api.model import NO_MAXIMUM  # retentionMax when the policy has no maximum

DEFAULT_REST = "http://127.0.0.1:9091"


class AdminError(click.ClickException):
    """The API refused, or could not be reached (printed as one line, exit status 1)."""

    def show(self, file: Any = None) -> None:
        click.echo(f"error: {self.message}", err=True)


class RestClient:
    def __init__(self, base: str, timeout: float = 120.0, credentials: tuple[str, str] | None = None,
                 tls_trust: str | None = None):
        self.base = base.rstrip("/")
        self.timeout = timeout
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if credentials is not None:
            pair = f"{credentials[0]}:{credentials[1]}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        self._ssl = None
        if tls_trust is not None:
            try:
                self._ssl = ssl.create_default_context(cafile=tls_trust)
            except (OSError, ssl.SSLError) as error:
                raise AdminError(f"cannot load the trusted certificates {tls_trust}: {error}") from None

    def call(self, method: str, path: str, body: dict | None = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=self._headers)
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._ssl) as response:
                text = response.read()
        except urllib.error.HTTPError as error:
            text = error.read()
            try:
                problem = json.loads(text)
                raise AdminError(f"{problem['code']} ({error.code}): {problem['message']}") from None
            except (ValueError, KeyError, TypeError):
                raise AdminError(f"HTTP {error.code}: {text[:200]!r}") from None
        except (urllib.error.URLError, OSError) as error:
            raise AdminError(f"cannot reach the REST API at {self.base}: {getattr(error, 'reason', error)}") from None
        return json.loads(text) if text else None


def table(headings: list[str], rows: list[list[Any]]) -> str:
    """Aligned columns, a rule under the headings."""
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max([len(heading)] + [len(row[column]) for row in cells]) for column, heading in enumerate(headings)]
    lines = ["  ".join(heading.ljust(width) for heading, width in zip(headings, widths, strict=True)).rstrip(),
             "  ".join("-" * width for width in widths)]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(lines)


def split_stream(name: str) -> tuple[str, str]:
    scope, slash, stream = name.partition("/")
    if not slash or not scope or not stream or "/" in stream:
        raise click.BadParameter(f"expected SCOPE/STREAM, got {name!r}")
    return urllib.parse.quote(scope, safe=""), urllib.parse.quote(stream, safe="")


NUMBER_BITS = 32  # a segment id is (creation epoch << 32) | number; describe shows the number (#4)
HISTORY_EPOCHS = 20  # describe shows this many of the newest epochs
EPOCHS_MAX = 10_000  # the most epochs the API lists: truncate looks segment numbers up in them


def _when(milliseconds: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(milliseconds / 1000)) + "Z"


def _cut_text(cut: dict[str, int]) -> str:
    return ", ".join(f"{segment}@{offset}" for segment, offset in cut.items()) or "-"


def _or_dash(value: Any) -> Any:
    return "-" if value is None else value  # a size the API could not give (its segment store unreachable)


def describe_stream(stream: dict) -> str:
    scaling, retention = stream["scalingPolicy"], stream["retentionPolicy"]
    policy = scaling["type"] + (f" target {scaling['targetRate']} x{scaling['scaleFactor']}"
                                if scaling["type"] != "FIXED_NUM_SEGMENTS" else "") + f", min {scaling['minSegments']}"
    kept = "none"
    if retention:
        maximum = retention.get("maxValue", NO_MAXIMUM)
        kept = f"{retention['type']} min {retention['value']}" + (f" max {maximum}" if maximum != NO_MAXIMUM else "")
    truncation = stream.get("truncation") or {"streamCut": {}, "bytesBefore": 0}
    lines = [f"stream {stream['scopeName']}/{stream['streamName']}: {stream['state']}, epoch {stream['currentEpoch']}",
             f"scaling: {policy}", f"retention: {kept}", f"tags: {', '.join(stream['tags']) or '-'}",
             f"head: {_cut_text(truncation['streamCut'])} ({truncation['bytesBefore']} bytes truncated)", ""]
    lines.append(table(["segment", "id", "epoch", "key range"], [
        [f"#{segment['number']}", segment["segmentId"], segment["epoch"],
         f"{segment['keyStart']:.4f} - {segment['keyEnd']:.4f}"] for segment in stream["segments"]]))
    if stream.get("subscribers"):
        lines += ["", table(["subscriber", "released up to", "reported"], [
            [entry["name"], _cut_text(entry["streamCut"]), _when(entry["updateTime"])]
            for entry in stream["subscribers"]])]
    return "\n".join(lines)


def scaling_history(epochs: list[dict]) -> str:
    """One line per epoch: when it began, its segment count, and the segments it sealed and created."""
    rows, previous = [], None
    for epoch in epochs:
        ids = {segment["segmentId"]: segment for segment in epoch["segments"]}
        if previous is None:
            change = "created"
        else:
            sealed = sorted(f"#{previous[i]['number']}" for i in set(previous) - set(ids))
            created = sorted(f"#{ids[i]['number']}" for i in set(ids) - set(previous))
            change = f"sealed {' '.join(sealed) or '-'}; created {' '.join(created) or '-'}"
        rows.append([epoch["epoch"], _when(epoch["creationTime"]), len(ids), change])
        previous = ids
    return table(["epoch", "began", "segments", "scale"], rows)


def parse_segment(text: str, option: str) -> tuple[int, bool]:
    """``(value, is_number)`` of a segment as an option gives it: its number as describe shows it (``4`` or
    ``#4``), or its full 64-bit id. A value below 2**32 without ``#`` is a number too: as an id it would be
    the segment of that number created in epoch 0, and numbers are unique in a stream."""
    digits = text.strip().removeprefix("#")
    if not (digits.isascii() and digits.isdigit()):
        raise click.BadParameter(f"expected a segment number (4 or #4, as describe shows it) or a segment id, "
                                 f"got {text!r}", param_hint=option)
    value = int(digits)
    marked = text.strip().startswith("#")
    if marked and value >> NUMBER_BITS:
        raise click.BadParameter(f"segment numbers are below 2**{NUMBER_BITS}, got {text!r}", param_hint=option)
    return value, marked or not value >> NUMBER_BITS


def resolve_segment(text: str, option: str, stream: str, segments: list[dict], which: str) -> int:
    """The full id of the segment ``text`` names (see ``parse_segment``), a number looked up in ``segments``
    (``which`` says which ones they are, for the error). Raises AdminError (one line) for an unknown or an
    ambiguous number; a full id is passed on as it is (the API says if it is wrong)."""
    value, is_number = parse_segment(text, option)
    if not is_number:
        return value
    matches = sorted({segment["segmentId"] for segment in segments if segment["number"] == value})
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise AdminError(f"{option} {text}: segment #{value} of {stream} is ambiguous (ids "
                         f"{', '.join(map(str, matches))}); give the full id")
    known = " ".join(f"#{number}" for number in sorted({segment["number"] for segment in segments}))
    raise AdminError(f"{option} {text}: {stream} has no segment #{value} among its {which} ({known or 'none'})")


class Admin:
    """What each subcommand prints (text, or the API's JSON)."""

    def __init__(self, client: RestClient, as_json: bool):
        self.client = client
        self.as_json = as_json

    def show(self, document: Any, text: str) -> None:
        click.echo(json.dumps(document, indent=2, sort_keys=True) if self.as_json else text)


pass_admin = click.make_pass_decorator(Admin)


@click.group()
@click.option("--rest", default=DEFAULT_REST, show_default=True, help="The controller's REST API (--rest-port).")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON instead of tables.")
@click.option("--user", default=None, help="Authenticate as this user (a controller with --password-file).")
@click.option("--password-stdin", is_flag=True,
              help="Read --user's password from standard input (else from $TRIBUTARY_PASSWORD).")
@click.option("--tls-trust", type=click.Path(exists=True, dir_okay=False), default=None,
              help="PEM file of the CA certificates to trust for an https:// API.")
@click.pass_context
def admin(context: click.Context, rest: str, as_json: bool, user: str | None, password_stdin: bool,
          tls_trust: str | None) -> None:
    """Administer scopes, streams, reader groups and key-value tables through the REST API."""
    credentials = None
    if user is not None:
        password: str | None = os.environ.get("TRIBUTARY_PASSWORD")
        if password_stdin:
            password = sys.stdin.readline().rstrip("\n")
        if password is None:
            raise click.UsageError("--user needs a password: --password-stdin, or TRIBUTARY_PASSWORD")
        credentials = (user, password)
    elif password_stdin:
        raise click.UsageError("--password-stdin needs --user")
    context.obj = Admin(RestClient(rest, credentials=credentials, tls_trust=tls_trust), as_json)


@admin.command("scopes")
@pass_admin
def list_scopes(admin: Admin) -> None:
    """List the scopes."""
    scopes = admin.client.call("GET", "/v1/scopes")
    admin.show(scopes, table(["scope"], [[scope["scopeName"]] for scope in scopes["scopes"]]))


@admin.command("create-scope")
@click.argument("scope")
@pass_admin
def create_scope(admin: Admin, scope: str) -> None:
    """Create a scope."""
    admin.show(admin.client.call("POST", "/v1/scopes", {"scopeName": scope}), f"created scope {scope}")


@admin.command("delete-scope")
@click.argument("scope")
@click.option("--recursive", is_flag=True, help="Seal and delete every stream, reader group and table in it first.")
@pass_admin
def delete_scope(admin: Admin, scope: str, recursive: bool) -> None:
    """Delete a scope (it must be empty unless --recursive)."""
    query = "?recursive=true" if recursive else ""
    admin.client.call("DELETE", f"/v1/scopes/{urllib.parse.quote(scope, safe='')}{query}")
    admin.show({"deleted": scope}, f"deleted scope {scope}")


@admin.command("streams")
@click.argument("scope")
@click.option("--tag", default=None, help="Only the streams carrying this tag.")
@pass_admin
def list_streams(admin: Admin, scope: str, tag: str | None) -> None:
    """List a scope's streams."""
    query = f"?tag={urllib.parse.quote(tag, safe='')}" if tag else ""
    streams = admin.client.call("GET", f"/v1/scopes/{urllib.parse.quote(scope, safe='')}/streams{query}")
    admin.show(streams, table(["stream"], [[stream["streamName"]] for stream in streams["streams"]]))


@admin.command("describe")
@click.argument("stream")
@pass_admin
def describe(admin: Admin, stream: str) -> None:
    """Describe SCOPE/STREAM: state, policies, current segments with their offsets (start: the head after
    truncation; tail: the end; kept: the bytes between)."""
    scope, name = split_stream(stream)
    found = admin.client.call("GET", f"/v1/scopes/{scope}/streams/{name}")
    sizes = {segment["segmentId"]: segment for segment in
             admin.client.call("GET", f"/v1/scopes/{scope}/streams/{name}/segments")["segments"]}
    for segment in found["segments"]:
        segment.update({key: sizes.get(segment["segmentId"], {}).get(key)
                        for key in ("startOffset", "tailOffset", "bytesKept")})
    epochs = admin.client.call("GET", f"/v1/scopes/{scope}/streams/{name}/epochs?limit={HISTORY_EPOCHS}")["epochs"]
    found["epochs"] = epochs
    text = (describe_stream(found) + "\n\n" + table(["segment", "start", "tail", "kept"], [
        [f"#{segment['number']}", _or_dash(segment["startOffset"]), _or_dash(segment["tailOffset"]),
         _or_dash(segment["bytesKept"])] for segment in found["segments"]])
        + f"\n\nscaling history (last {HISTORY_EPOCHS} epochs at most):\n" + scaling_history(epochs))
    admin.show(found, text)


def _configuration(segments: int, scaling: str, target_rate: int, scale_factor: int, retention_time: int | None,
                   retention_size: int | None, tags: tuple[str, ...]) -> dict:
    types = {"fixed": "FIXED_NUM_SEGMENTS", "kbytes": "BY_RATE_IN_KBYTES_PER_SEC",
             "events": "BY_RATE_IN_EVENTS_PER_SEC"}
    if retention_time is not None and retention_size is not None:
        raise click.UsageError("give at most one of --retention-time and --retention-size")
    retention = ({"type": "TIME", "value": retention_time} if retention_time is not None else
                 {"type": "SIZE", "value": retention_size} if retention_size is not None else None)
    return {"scalingPolicy": {"type": types[scaling], "minSegments": segments, "targetRate": target_rate,
                              "scaleFactor": scale_factor},
            "retentionPolicy": retention, "tags": list(tags)}


def _configuration_options(function):
    for option in reversed([
        click.option("--segments", default=1, show_default=True, type=click.IntRange(1, 10000),
                     help="Segments (the minimum, for a rate-based policy)."),
        click.option("--scaling", type=click.Choice(["fixed", "kbytes", "events"]), default="fixed",
                     show_default=True, help="Fixed, or scaled by KB/s or events/s per segment."),
        click.option("--target-rate", default=0, show_default=True, type=click.IntRange(0),
                     help="Rate-based scaling: the target per segment."),
        click.option("--scale-factor", default=0, show_default=True, type=click.IntRange(0),
                     help="Rate-based scaling: at most this many segments replace a hot one."),
        click.option("--retention-time", type=click.IntRange(0), default=None, help="Keep this many milliseconds."),
        click.option("--retention-size", type=click.IntRange(0), default=None, help="Keep this many bytes."),
        click.option("--tag", "tags", multiple=True, help="A tag (repeat for more)."),
    ]):
        function = option(function)
    return function


@admin.command("create")
@click.argument("stream")
@_configuration_options
@pass_admin
def create(admin: Admin, /, stream: str, **options: Any) -> None:
    """Create SCOPE/STREAM."""
    scope, name = split_stream(stream)
    created = admin.client.call("POST", f"/v1/scopes/{scope}/streams",
                                {"streamName": urllib.parse.unquote(name), **_configuration(**options)})
    admin.show(created, describe_stream(created))


@admin.command("update")
@click.argument("stream")
@_configuration_options
@pass_admin
def update(admin: Admin, /, stream: str, **options: Any) -> None:
    """Replace SCOPE/STREAM's policies and tags."""
    scope, name = split_stream(stream)
    updated = admin.client.call("PUT", f"/v1/scopes/{scope}/streams/{name}", _configuration(**options))
    admin.show(updated, describe_stream(updated))


@admin.command("scale")
@click.argument("stream")
@click.option("--seal", "sealed", multiple=True, required=True,
              help="A current segment to seal: its number as describe shows it (4 or '#4') or its id (repeat).")
@click.option("--range", "ranges", multiple=True, required=True,
              help="A new segment's key range LOW:HIGH (repeat); together they cover the sealed ones'.")
@pass_admin
def scale(admin: Admin, stream: str, sealed: tuple[str, ...], ranges: tuple[str, ...]) -> None:
    """Replace segments of SCOPE/STREAM by new ones over the given key ranges; waits until done."""
    scope, name = split_stream(stream)
    numbers = any(parse_segment(text, "--seal")[1] for text in sealed)
    pairs = []
    for text in ranges:
        low, colon, high = text.partition(":")
        try:
            pairs.append([float(low), float(high)])
        except ValueError:
            raise click.BadParameter(f"expected LOW:HIGH, got {text!r}", param_hint="--range") from None
        if not colon:
            raise click.BadParameter(f"expected LOW:HIGH, got {text!r}", param_hint="--range")
    current = admin.client.call("GET", f"/v1/scopes/{scope}/streams/{name}")["segments"] if numbers else []
    ids = [resolve_segment(text, "--seal", stream, current, "current segments") for text in sealed]
    scaled = admin.client.call("POST", f"/v1/scopes/{scope}/streams/{name}/scale",
                               {"sealedSegments": ids, "newRanges": pairs})
    admin.show(scaled, describe_stream(scaled))


@admin.command("seal")
@click.argument("stream")
@pass_admin
def seal(admin: Admin, stream: str) -> None:
    """Seal SCOPE/STREAM (no more writes)."""
    scope, name = split_stream(stream)
    admin.show(admin.client.call("PUT", f"/v1/scopes/{scope}/streams/{name}/state", {"streamState": "SEALED"}),
               f"sealed {stream}")


@admin.command("truncate")
@click.argument("stream")
@click.option("--cut", "cut", multiple=True, required=True,
              help="SEGMENT=OFFSET (repeat): the new head; SEGMENT is its number as describe shows it (4 or '#4') "
                   "or its id.")
@pass_admin
def truncate(admin: Admin, stream: str, cut: tuple[str, ...]) -> None:
    """Truncate SCOPE/STREAM at a stream cut."""
    scope, name = split_stream(stream)
    parsed = []
    for text in cut:
        segment, equals, offset = text.partition("=")
        if not equals or not (offset.isascii() and offset.isdigit()):
            raise click.BadParameter(f"expected SEGMENT=OFFSET, got {text!r}", param_hint="--cut")
        parsed.append((segment, parse_segment(segment, "--cut")[1], int(offset)))
    known: list[dict] = []
    if any(is_number for _, is_number, _ in parsed):  # a cut may name sealed segments: look in the history
        epochs = admin.client.call("GET", f"/v1/scopes/{scope}/streams/{name}/epochs?limit={EPOCHS_MAX}")["epochs"]
        known = [segment for epoch in epochs for segment in epoch["segments"]]
    positions = {str(resolve_segment(segment, "--cut", stream, known, "segments")): offset
                 for segment, _, offset in parsed}
    truncated = admin.client.call("POST", f"/v1/scopes/{scope}/streams/{name}/truncate", {"streamCut": positions})
    admin.show(truncated, describe_stream(truncated))


@admin.command("delete")
@click.argument("stream")
@pass_admin
def delete(admin: Admin, stream: str) -> None:
    """Delete SCOPE/STREAM (it must be sealed)."""
    scope, name = split_stream(stream)
    admin.client.call("DELETE", f"/v1/scopes/{scope}/streams/{name}")
    admin.show({"deleted": stream}, f"deleted {stream}")


@admin.command("reader-groups")
@click.argument("scope")
@pass_admin
def reader_groups(admin: Admin, scope: str) -> None:
    """List a scope's reader groups with their streams and lag."""
    quoted = urllib.parse.quote(scope, safe="")
    groups = admin.client.call("GET", f"/v1/scopes/{quoted}/readergroups")["readerGroups"]
    details = [admin.client.call("GET", f"/v1/scopes/{quoted}/readergroups/"
                                        f"{urllib.parse.quote(group['readerGroupName'], safe='')}") for group in groups]
    admin.show({"readerGroups": details}, table(["group", "streams", "lag (bytes)"], [
        [group["readerGroupName"], ", ".join(group["streams"]),
         ", ".join(f"{name}: {lag if lag >= 0 else '-'}" for name, lag in group["lagBytes"].items()) or "-"]
        for group in details]))


@admin.command("tables")
@click.argument("scope")
@pass_admin
def tables(admin: Admin, scope: str) -> None:
    """List a scope's key-value tables."""
    found = admin.client.call("GET", f"/v1/scopes/{urllib.parse.quote(scope, safe='')}/kvtables")
    admin.show(found, table(["table"], [[entry["kvtName"]] for entry in found["kvtables"]]))


@admin.command("cluster")
@pass_admin
def cluster(admin: Admin) -> None:
    """Where the containers run, and the controllers."""
    found = admin.client.call("GET", "/v1/cluster")
    text = table(["segment store", "containers"], [
        [store["address"], ",".join(map(str, store["containers"])) or "-"] for store in found["segmentStores"]])
    text += "\n\n" + table(["controller"], [[controller["address"]] for controller in found["controllers"]])
    admin.show(found, text)
