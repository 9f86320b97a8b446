"""Recovery reports its progress (issue 25): records replayed of those the log holds, bytes, operations and an
ETA, in "recovery progress" log lines while it runs and as metrics."""

from __future__ import annotations

import logging

from server.containers import recovery_progress
from server.containers.container import SegmentContainer
from server.containers.recovery_progress import RecoveryProgress
from server.tier1 import LocalDurableDataLog

SEGMENT = "scope/progress/0.#epoch.0"


def log_at(tmp_path) -> LocalDurableDataLog:
    return LocalDurableDataLog(tmp_path / "log", file_size=1 << 20, max_append_size=64 * 1024, spare_files_max=0)


def test_the_eta_follows_the_rate_so_far(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(recovery_progress.time, "monotonic", lambda: clock[0])
    progress = RecoveryProgress(1_000)
    assert progress.eta_seconds() is None  # nothing read yet: no rate
    progress.records = 250
    clock[0] += 2.0
    assert progress.eta_seconds() == 6.0
    assert RecoveryProgress(None).eta_seconds() is None  # a log that cannot tell its size
    progress.finished = clock[0]
    assert progress.eta_seconds() == 0.0


async def test_a_restart_reports_what_it_replayed_of_what_the_log_held(tmp_path, monkeypatch, caplog):
    owner = SegmentContainer(0, log_at(tmp_path))  # no Tier-2: the log keeps everything
    await owner.start()
    await owner.create_segment(SEGMENT)
    for number in range(300):
        await owner.append(SEGMENT, b"%d" % number)
    await owner.stop()

    monkeypatch.setattr(recovery_progress, "LOG_EVERY", 0.0)
    again = SegmentContainer(0, log_at(tmp_path))
    with caplog.at_level(logging.INFO, logger="tributary.container"):
        await again.start()
    progress = again.recovery_progress()
    assert progress is not None and progress.finished is not None
    assert progress.records == progress.records_total >= 300
    assert progress.operations >= 300 and progress.bytes > 300
    lines = [record for record in caplog.records if record.getMessage() == "recovery progress"]
    assert len(lines) >= 300
    assert lines[0].records == 1 and lines[0].records_total == progress.records_total
    assert all(line.eta_seconds is not None and line.eta_seconds >= 0 for line in lines)
    done = [record for record in caplog.records if record.getMessage() == "recovery done"]
    assert len(done) == 1 and done[0].records == progress.records and done[0].eta_seconds == 0
    await again.stop()
