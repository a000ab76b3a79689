"""Which leases belong to dead runs, and what a run record holds, without a cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta

from hybridsearch.ingest.lease import LEASE_S, IngestResult, is_dead


def _gone_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_is_dead() -> None:
    at = datetime.now(UTC)
    fresh = (at - timedelta(seconds=5)).isoformat()
    stale = (at - timedelta(seconds=LEASE_S + 1)).isoformat()
    assert not is_dead({"host": "here", "pid": os.getpid(), "heartbeat_at": fresh}, "here", at)
    assert is_dead({"host": "here", "pid": _gone_pid(), "heartbeat_at": fresh}, "here", at)  # SIGKILLed
    assert not is_dead({"host": "there", "pid": _gone_pid(), "heartbeat_at": fresh}, "here", at)  # pid is not ours
    assert is_dead({"host": "there", "pid": 1, "heartbeat_at": stale}, "here", at)  # no heartbeat: lease over
    assert is_dead({"host": "here", "pid": os.getpid(), "started_at": stale}, "here", at)


def test_running_record_has_no_empty_dates() -> None:
    doc = IngestResult(run_id="r", index="i", source="s", started_at="2026-01-01T00:00:00+00:00").summary_doc()
    assert doc["status"] == "running" and doc["ended_at"] is None and doc["@timestamp"] == doc["started_at"]
    assert doc["reused"] == 0
