"""spark_io's pure parts: option parsing and checking, offsets as canonical JSON, how a micro-batch's
budget is shared, and slices between two cuts."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clients.model import RetentionType, ScaleType
from clients.stream_cut import StreamCut
from spark_io.access import ServerAccess
from spark_io.offsets import cut_of, offset_of
from spark_io.options import read_options, stream_options, write_options
from spark_io.stream_reader import _shares, slices_between

BASE = {"scope": "s", "stream": "t"}
segment_ids = st.integers(min_value=0, max_value=2**63 - 1)
positions = st.dictionaries(segment_ids, st.integers(min_value=0, max_value=2**62), max_size=20)


@given(positions)
def test_an_offset_round_trips_through_json_and_is_canonical(cut_positions):
    """offset -> JSON text (as Spark keeps it) -> offset -> cut is the identity, and one cut always gives
    one text, whatever order its positions came in (Spark compares offsets as text)."""
    cut = StreamCut("scope", "stream", cut_positions)
    text = json.dumps(offset_of(cut))
    assert cut_of(json.loads(text)) == cut
    shuffled = StreamCut("scope", "stream", dict(reversed(list(cut_positions.items()))))
    assert json.dumps(offset_of(shuffled)) == text
    assert json.dumps(json.loads(text), sort_keys=True) == text


@pytest.mark.parametrize("bad", [{}, {"v": 2, "scope": "s", "stream": "t", "cut": {}}, {"v": 1, "cut": {}},
                                 {"v": 1, "scope": "s", "stream": "t", "cut": {"x": 1}}, "text"])
def test_other_offsets_are_refused(bad):
    with pytest.raises(ValueError):
        cut_of(bad)


def test_read_defaults_follow_the_connector():
    batch = read_options(BASE, streaming=False)
    stream = read_options(BASE, streaming=True)
    assert (batch.start_cut, batch.end_cut) == ("earliest", "latest")
    assert (stream.start_cut, stream.end_cut) == ("latest", "unbounded")
    assert batch.target.access == ServerAccess("tcp://127.0.0.1:9090")
    assert batch.max_partition_bytes == 128 * 1024 * 1024
    assert read_options({**BASE, "start_stream_cut": "UNBOUNDED"}, streaming=True).start_cut == "earliest"
    assert read_options({**BASE, "end_stream_cut": "unbounded"}, streaming=False).end_cut == "latest"
    text = StreamCut("s", "t", {0: 10}).as_text()
    assert read_options({**BASE, "start_stream_cut": text}, streaming=False).start_cut == text


def test_write_defaults_and_stream_creation_options():
    assert write_options(BASE, streaming=False).transaction_timeout_ms == 120_000
    assert write_options(BASE, streaming=True).transaction_timeout_ms == 30_000
    options = write_options({**BASE, "exactly_once": "False", "read_after_write_consistency": "0"}, streaming=False)
    assert not options.exactly_once and not options.read_after_write_consistency
    created = stream_options({**BASE, "default_num_segments": "3", "default_segment_target_rate_bytes_per_sec": "5000",
                              "default_scale_factor": "4", "default_retention_size_bytes": "1000"}).configuration
    assert created.scaling.scale_type == ScaleType.BY_RATE_IN_KBYTES_PER_SEC
    assert (created.scaling.target_rate, created.scaling.scale_factor, created.scaling.min_num_segments) == (5, 4, 3)
    assert created.retention.retention_type == RetentionType.SIZE and created.retention.minimum == 1000
    by_events = stream_options({**BASE, "default_segment_target_rate_events_per_sec": "100"}).configuration
    assert by_events.scaling.scale_type == ScaleType.BY_RATE_IN_EVENTS_PER_SEC


@pytest.mark.parametrize("options, named", [
    ({"scope": "s"}, "option stream is required"),
    ({"stream": "t"}, "option scope is required"),
    ({**BASE, "scope": "bad/scope"}, "option scope"),
    ({**BASE, "controller": "http://localhost:9090"}, "option controller"),
    ({**BASE, "controller": "tcp://a:9090,tls://b:9090"}, "option controller"),
    ({**BASE, "transaction_timeout_ms": "1000"}, "option transaction_timeout_ms"),
    ({**BASE, "transaction_timeout_ms": "ten"}, "option transaction_timeout_ms"),
    ({**BASE, "exactly_once": "sometimes"}, "option exactly_once"),
    ({**BASE, "default_segment_target_rate_bytes_per_sec": "1", "default_segment_target_rate_events_per_sec": "1"},
     "conflict"),
])
def test_bad_write_options_name_the_option(options, named):
    with pytest.raises(ValueError, match=named):
        write_options(options, streaming=False)


@pytest.mark.parametrize("options, named", [
    ({**BASE, "end_stream_cut": "earliest"}, "end_stream_cut"),
    ({**BASE, "start_stream_cut": "not-a-cut"}, "start_stream_cut"),
    ({**BASE, "max_events_per_trigger": "0"}, "max_events_per_trigger"),
    ({**BASE, "approx_bytes_per_trigger": "1", "max_events_per_trigger": "1"}, "conflict"),
])
def test_bad_read_options_name_the_option(options, named):
    with pytest.raises(ValueError, match=named):
        read_options(options, streaming=True)


def test_a_subscriber_is_a_reader_group_name_of_a_streaming_read():
    assert read_options({**BASE, "subscriber": "totals"}, streaming=True).subscriber == "totals"
    assert read_options(BASE, streaming=True).subscriber is None
    with pytest.raises(ValueError, match="option subscriber: only a streaming read"):
        read_options({**BASE, "subscriber": "totals"}, streaming=False)
    with pytest.raises(ValueError, match="option subscriber"):
        read_options({**BASE, "subscriber": "bad/name"}, streaming=True)


def test_credentials_and_trust_are_read_where_the_client_opens_and_never_shown(tmp_path, monkeypatch):
    secret = tmp_path / "password"
    secret.write_text("s3cret pass\n")
    by_file = stream_options({**BASE, "controller": "tls://a:9090,b:9090", "username": "spark",
                              "password_file": str(secret), "trust_store": "/etc/ca.pem"}).access
    assert by_file.client_config().credentials == ("spark", "s3cret pass")  # the file's one line, without its end
    assert by_file.client_config().tls_trust == "/etc/ca.pem"
    monkeypatch.setenv("TRIBUTARY_TEST_PASSWORD", "from-env")
    by_env = stream_options({**BASE, "username": "spark", "password_env": "TRIBUTARY_TEST_PASSWORD"}).access
    assert by_env.client_config().credentials == ("spark", "from-env")
    given_inline = stream_options({**BASE, "username": "spark", "password": " inline "}).access
    assert given_inline.client_config().credentials == ("spark", " inline ")
    for access in (by_file, by_env, given_inline):
        assert "s3cret" not in repr(access) and "from-env" not in repr(access) and "inline" not in repr(access)
    assert "password=***" in repr(given_inline) and "password_env='TRIBUTARY_TEST_PASSWORD'" in repr(by_env)
    assert stream_options(BASE).access.client_config().credentials is None
    monkeypatch.delenv("TRIBUTARY_TEST_PASSWORD")
    with pytest.raises(ValueError, match="password_env: the environment variable TRIBUTARY_TEST_PASSWORD is not set"):
        by_env.client_config()
    secret.unlink()
    with pytest.raises(ValueError, match=f"password_file: cannot read {secret}"):
        by_file.client_config()


@pytest.mark.parametrize("options, named", [
    ({"username": "u"}, "option username needs a password"),
    ({"password_file": "/p"}, "option password_file needs option username"),
    ({"username": "u", "password": "hunter2", "password_env": "P"}, "options password_env and password conflict"),
    ({"username": "u:v", "password": "hunter2"}, "option username"),
    ({"trust_store": "/ca.pem"}, "option trust_store: the controller URI tcp://127.0.0.1:9090 is not TLS"),
])
def test_bad_access_options_name_the_option_and_show_no_secret(options, named):
    with pytest.raises(ValueError, match=named) as raised:
        stream_options({**BASE, **options})
    assert "hunter2" not in str(raised.value)


@given(st.integers(min_value=1, max_value=10**9),
       st.dictionaries(st.integers(0, 50), st.integers(0, 10**9), min_size=1, max_size=10))
def test_a_budget_is_shared_within_itself_and_always_moves(budget, backlog):
    shares = _shares(budget, backlog) if any(backlog.values()) else None
    if shares is None:
        return
    assert sum(shares.values()) <= max(budget, 1)
    assert any(shares.values())  # progress: at least one segment moves
    assert all(backlog[segment] > 0 or share <= 1 for segment, share in shares.items())
    total = sum(backlog.values())
    for segment, share in shares.items():
        if share > 1:
            assert share <= budget * backlog[segment] // total


def test_slices_between_two_cuts_start_new_segments_at_zero_and_skip_empty_ones():
    start = StreamCut("s", "t", {0: 100, 1: 50})
    end = StreamCut("s", "t", {0: 100, 1: 80, (1 << 32) | 2: 40})
    slices = slices_between(start, end)
    assert [(piece.segment.segment_id, piece.start_offset, piece.end_offset) for piece in slices] == [
        (1, 50, 80), ((1 << 32) | 2, 0, 40)]
