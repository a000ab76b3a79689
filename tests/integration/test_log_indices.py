"""One index specification on a real node: chunk versions carry the engine's settings
whoever creates them; the log indices are re-created from their spec, never by a write with guessed mappings;
a write block is reported as a block; ``hsp doctor`` checks the log indices."""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict
from pathlib import Path

import pytest

from hybridsearch.cli.main import main
from hybridsearch.doctor import check_log_index
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import AccessDenied, IndexBlocked
from hybridsearch.eval.harness import choose_index
from hybridsearch.index.logs import LogWriter
from hybridsearch.index.spec import LOG_KINDS
from hybridsearch.index.versions import create_version, ensure_index, live_index
from hybridsearch.ingest.lease import IngestResult, RunRecord, now
from hybridsearch.query.querylog import QueryLogger
from hybridsearch.settings import Settings, load_settings


@pytest.fixture()
def hx(es: EngineClient, es_url: str, tmp_path: Path) -> Iterator[Settings]:
    """Settings under a prefix of its own starting with ``hx-``; everything under it is deleted afterwards."""
    prefix = f"hx-{uuid.uuid4().hex[:10]}"
    yield load_settings(es_url=es_url, index={"prefix": prefix}, ingest={"dead_letter_dir": tmp_path / "dl"},
                        query={"log_queries": False})
    for name in (f"{prefix}-query-log", f"{prefix}-ingest-runs"):  # a blocked index can still be deleted; be sure
        if es.send(request.index_exists(name)):
            es.send(request.put_settings(name, {"index.blocks.write": None}))
    es.send(request.delete_index(f"{prefix}-*", expand_wildcards="all"))


def flat_settings(es: EngineClient, index: str) -> dict[str, str]:
    settings: dict[str, str] = es.send(request.get_settings(index, flat_settings=True))[index]["settings"]
    return settings


def needs_engine_settings(es: EngineClient) -> dict[str, str]:
    want = es.engine.chunk_index_settings
    if not want:
        pytest.skip(f"{es.engine.kind} {es.engine.version} needs no extra chunk-index settings")
    return want


# ------------------------------------------------------------------------------------------- chunk versions

def test_hsp_index_create_and_migrate_carry_the_engine_settings(es: EngineClient, hx: Settings,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    want = needs_engine_settings(es)  # Elasticsearch 9.1+: index.dense_vector.hnsw_filter_heuristic: fanout
    monkeypatch.setenv("HSP_ES_URL", hx.es.url)
    monkeypatch.setenv("HSP_INDEX__PREFIX", hx.index.prefix)
    monkeypatch.setenv("HSP_INGEST__DEAD_LETTER_DIR", str(hx.ingest.dead_letter_dir))
    assert main(["index", "create"]) == 0
    v1 = hx.index.versioned(1)
    assert {k: flat_settings(es, v1).get(k) for k in want} == want
    assert main(["index", "migrate", "--index-options", "hnsw"]) == 0  # an empty index: nothing to embed
    v2 = hx.index.versioned(2)
    assert live_index(es, hx.index) == v2
    assert {k: flat_settings(es, v2).get(k) for k in want} == want


def test_the_evaluation_creates_its_versions_from_the_same_spec(es: EngineClient, hx: Settings) -> None:
    want = needs_engine_settings(es)
    first = choose_index(es, hx)
    assert first.action == "created" and {k: flat_settings(es, first.index).get(k) for k in want} == want
    assert choose_index(es, hx).action == "reused"
    other = hx.model_copy(update={"index": hx.index.model_copy(update={"index_options": "hnsw"})})
    second = choose_index(es, other)
    assert second.action == "created" and second.index == hx.index.versioned(2)
    assert {k: flat_settings(es, second.index).get(k) for k in want} == want
    assert choose_index(es, hx).index == first.index  # switched back: the fit check reads v1 as fitting


def test_ensure_index_and_create_version_build_the_same_index(es: EngineClient, hx: Settings) -> None:
    a = ensure_index(es, hx)
    b = create_version(es, hx)
    assert b == hx.index.versioned(2)
    ma, mb = (es.send(request.get_mapping(i))[i]["mappings"] for i in (a, b))
    assert ma == mb
    sa, sb = flat_settings(es, a), flat_settings(es, b)
    keep = ("index.number_of_replicas", "index.refresh_interval", "index.number_of_shards",
            *es.engine.chunk_index_settings)
    assert {k: sa.get(k) for k in keep} == {k: sb.get(k) for k in keep}


# ------------------------------------------------------------------------------------------- query log

def test_query_log_deleted_mid_traffic_is_recreated_with_its_own_mapping(es: EngineClient, hx: Settings) -> None:
    logger = QueryLogger(es, hx, batch=20)
    stop = threading.Event()
    sent = 0

    def traffic() -> None:
        nonlocal sent
        while not stop.is_set():
            logger.submit({"@timestamp": now(), "query": f"tau protein {sent}", "mode": "hybrid", "k": 10})
            sent += 1
            time.sleep(0.002)

    worker = threading.Thread(target=traffic)
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while logger.written < 50 and time.monotonic() < deadline:
            time.sleep(0.05)
        # Delete it under running traffic, three times, each time once the logger has re-created it and written
        # to it again (a delete between its re-create and its write is a second disappearance, which it reports).
        for _ in range(3):
            written = logger.written
            recreated = time.monotonic() + 30
            while time.monotonic() < recreated and not (
                    logger.written > written and es.send(request.index_exists(hx.index.query_log))):
                time.sleep(0.05)
            es.send(request.delete_index(hx.index.query_log))
            time.sleep(0.3)
    finally:
        stop.set()
        worker.join()
    assert logger.flush(20)
    logger.close()
    name = hx.index.query_log
    props = es.send(request.get_mapping(name))[name]["mappings"]["properties"]
    assert props["mode"]["type"] == "keyword"
    assert props["query"]["type"] == "text" and props["query"]["fields"]["raw"]["type"] == "keyword"
    assert flat_settings(es, name)["index.number_of_replicas"] == str(hx.index.replicas)
    assert es.send(request.cluster_health(index=name))["status"] == "green"
    assert check_log_index(es, hx, "query_log").status == "OK"
    es.send(request.refresh(name))
    assert int(es.send(request.count(name))["count"]) > 0  # what came after the last deletion was written
    assert logger.failed == 0 and logger.dropped == 0, logger.last_error


def test_query_log_write_block_is_reported_as_a_block(es: EngineClient, hx: Settings) -> None:
    writer = LogWriter(es, hx, "query_log")
    assert writer.write([(None, {"query": "first", "mode": "bm25"})]).written == 1
    es.send(request.put_settings(hx.index.query_log, {"index.blocks.write": True}))
    done = writer.write([(None, {"query": "second", "mode": "bm25"})])
    assert done.written == 0 and done.failed == 1
    assert isinstance(done.error, IndexBlocked) and not isinstance(done.error, AccessDenied)
    assert done.error.index == hx.index.query_log and done.error.block == "index.blocks.write"
    assert "index.blocks.write" in str(done.error.fix) and "credential" not in str(done.error).lower()


# ------------------------------------------------------------------------------------------- ingest runs

def test_write_blocked_ingest_runs_index_is_a_block_and_the_record_is_stored_later(
        es: EngineClient, hx: Settings, caplog: pytest.LogCaptureFixture) -> None:
    lock = threading.Lock()
    result = IngestResult(run_id="run-blocked", index=hx.index.versioned(1), source="t", started_at=now())
    record = RunRecord(es, hx, result, lock)
    record.start()
    runs = hx.index.ingest_runs
    es.send(request.put_settings(runs, {"index.blocks.write": True}))
    result.status, result.indexed, result.ended_at = "completed", 400, now()
    with caplog.at_level("WARNING"):
        record.finish()
    assert isinstance(record.error, IndexBlocked) and record.error.index == runs
    text = caplog.text
    assert "index.blocks.write" in text and "credential" not in text.lower() and "HSP_ES__" not in text
    assert record.unrecorded_path is not None
    assert record.unrecorded_path.parent == Path(hx.ingest.dead_letter_dir) / "unrecorded-runs"
    check = check_log_index(es, hx, "ingest_runs")
    assert check.status == "FAIL" and "index.blocks.write" in check.detail and runs in str(check.fix)

    es.send(request.put_settings(runs, {"index.blocks.write": None}))
    nxt = RunRecord(es, hx, IngestResult(run_id="run-next", index=result.index, source="t", started_at=now()),
                    threading.Lock())
    nxt.start()  # stores the finished run, which is not marked killed
    nxt.finish()
    es.send(request.refresh(runs))
    stored = es.send(request.get_doc(runs, "run-blocked"))
    assert stored is not None and stored["_source"]["status"] == "completed"
    assert stored["_source"]["indexed"] == 400
    assert not record.unrecorded_path.exists()


def test_ingest_runs_index_deleted_is_recreated_from_its_spec(es: EngineClient, hx: Settings) -> None:
    result = IngestResult(run_id="run-1", index=hx.index.versioned(1), source="t", started_at=now())
    record = RunRecord(es, hx, result, threading.Lock())
    record.start()
    es.send(request.delete_index(hx.index.ingest_runs))
    result.status = "completed"
    record.finish()
    assert record.error is None
    assert check_log_index(es, hx, "ingest_runs").status == "OK"
    mapping = es.send(request.get_mapping(hx.index.ingest_runs))[hx.index.ingest_runs]["mappings"]
    assert mapping["dynamic"] == "strict" and mapping["properties"]["status"]["type"] == "keyword"


# ------------------------------------------------------------------------------------------- doctor

def test_doctor_checks_the_log_indices(es: EngineClient, hx: Settings) -> None:
    checks = {c.name: c for c in [check_log_index(es, hx, kind) for kind in LOG_KINDS]}
    assert set(checks) == {"query-log", "ingest-runs", "ingest-state"}
    assert all(c.status == "WARN" for c in checks.values())  # none exists yet
    ensure_index(es, hx)
    assert [check_log_index(es, hx, kind).status for kind in LOG_KINDS] == ["OK"] * len(LOG_KINDS)
    # a query log made by a write with guessed mappings: FAIL, naming the fields
    name = hx.index.query_log
    es.send(request.delete_index(name))
    es.send(request.put_doc(name, "x", {"query": "tau", "mode": "hybrid"}))
    check = check_log_index(es, hx, "query_log")
    assert check.status == "FAIL"
    assert "query.raw" in check.detail and "mode.type" in check.detail and "dynamic" in check.detail
    assert f"DELETE {name}" in str(check.fix)
    assert json.dumps(asdict(check))  # printable by `hsp doctor --json`
