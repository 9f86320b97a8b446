"""The real pravega client's byte streams and transactions through `tributary standalone`.

Byte stream: write, flush, head/tail offsets, seek from start/current/end, read, truncate (which
the client sends straight to the segment store), append, and a second byte stream on the same
stream. Transactions: one committed (its events appear, in key order) and one aborted (its event
never does)."""

from __future__ import annotations

import pytest

from tests.support.pravega_driver import run_scenario
from tests.support.standalone import BINDING_TARGETS, interop_server

pytestmark = [pytest.mark.interop, pytest.mark.process]
DATA_LENGTH = 4096


@pytest.fixture(params=BINDING_TARGETS)
def standalone(request, tmp_path):
    yield from interop_server(request, tmp_path)


def test_byte_stream_write_seek_read_truncate(standalone, tmp_path):
    """Every ByteStream operation of the binding, against the head and tail the segment store reports."""
    result = run_scenario("byte_stream", standalone.controller_uri, {"scope": "bytes", "stream": "b"},
                          tmp_path / "bytes.out")
    assert result["empty_offsets"] == [0, 0]
    assert result["offsets_after_write"] == [0, DATA_LENGTH]
    assert result["read_all"] and result["read_at_1000"] and result["read_tail"]
    assert result["tell_after_seek"] == 1000
    assert result["seek_from_end"] == DATA_LENGTH - 96
    assert result["offsets_after_truncate"] == [2048, DATA_LENGTH]
    assert result["read_after_truncate"]
    assert result["tail_after_append"] == DATA_LENGTH + 4
    assert result["reopened_read"] == "more"


def test_committed_transaction_is_read_and_aborted_one_is_not(standalone, tmp_path):
    """begin/write/commit and begin/write/abort with the binding's transactional writer."""
    result = run_scenario("transactions", standalone.controller_uri, {"scope": "txn", "stream": "t"},
                          tmp_path / "txn.out", timeout=150)
    assert result["open_before_commit"] is True
    assert result["open_after_abort"] is False
    received = result["received"]
    assert "aborted:0" not in received
    assert sorted(received, key=lambda event: int(event.split(":")[1])) == [f"k{n % 3}:{n}" for n in range(50)]
    for key in range(3):
        numbers = [int(event.split(":")[1]) for event in received if event.startswith(f"k{key}:")]
        assert numbers == sorted(numbers)
