"""What the engine seam hands the rest of the package is one shape on every engine: bulk results, the answer on
privileges, the rendered ``_meta``. Against the stand-in server (the real client libraries), no cluster."""

from __future__ import annotations

import socket
from typing import Any

import pytest

from hybridsearch.doctor import check_access
from hybridsearch.engine import ELASTICSEARCH, OPENSEARCH, UNREACHABLE, Dialect, EngineClient, EngineKind, request
from hybridsearch.errors import AccessDenied, ClusterError, ClusterUnavailable
from hybridsearch.index.access import NO_API, SECURITY_OFF, check_privileges
from hybridsearch.index.spec import chunk_meta, load_template
from hybridsearch.ingest.writer import write_actions
from hybridsearch.settings import ClusterSettings, IngestSettings, load_settings
from standin import Canned

ENGINES: list[EngineKind] = ["elasticsearch", "opensearch"]


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("kind", ENGINES)
def test_a_bulk_request_without_an_answer_raises_on_every_engine(kind: EngineKind) -> None:
    es = EngineClient(ClusterSettings(url=f"http://127.0.0.1:{closed_port()}", engine=kind, max_retries=0))
    actions = [{"_op_type": "index", "_index": "x", "_id": str(i), "_source": {"doc_id": str(i)}} for i in range(3)]
    with pytest.raises(UNREACHABLE):
        es.send(request.bulk(actions))


@pytest.mark.parametrize("kind", ENGINES)
def test_the_writer_sees_an_unreachable_cluster_the_same_on_every_engine(kind: EngineKind) -> None:
    es = EngineClient(ClusterSettings(url=f"http://127.0.0.1:{closed_port()}", engine=kind, max_retries=0))
    actions = [{"_op_type": "index", "_index": "x", "_id": "a", "_source": {"doc_id": "d"}}]
    waits: list[float] = []
    with pytest.raises(ClusterUnavailable, match="stayed unreachable through 3 bulk retries"):
        write_actions(es, actions, IngestSettings(bulk_max_retries=3, bulk_initial_backoff=0.5, bulk_max_backoff=1.5),
                      sleep=waits.append)
    assert waits == [0.5, 1.0, 1.5]  # exponential, capped


@pytest.mark.parametrize("kind", ENGINES)
def test_answered_bulk_items_pass_as_they_are(fake_es: Canned, kind: EngineKind) -> None:
    fake_es.body = {"took": 1, "errors": True, "items": [
        {"index": {"_index": "x", "_id": "a", "status": 201, "result": "created"}},
        {"index": {"_index": "x", "_id": "b", "status": 429, "error": {"type": "es_rejected_execution_exception",
                                                                       "reason": "queue full"}}}]}
    es = EngineClient(ClusterSettings(url=fake_es.url, engine=kind, max_retries=0))
    actions = [{"_op_type": "index", "_index": "x", "_id": i, "_source": {"doc_id": i}} for i in "ab"]
    report = write_actions(es, actions, IngestSettings(bulk_max_retries=0))
    assert (report.created, report.ok_ids) == (1, {"a"})
    assert [(f.chunk_id, f.status) for f in report.failures] == [("b", 429)]
    assert "queue full" in report.failures[0].reason
    ok, failed = request.bulk_failures(es.send(request.bulk(actions)))
    assert ok == 1 and [f["index"]["_id"] for f in failed] == ["b"]


@pytest.mark.parametrize("kind", ENGINES)
def test_a_refused_bulk_request_retries_each_of_its_items(fake_es: Canned, kind: EngineKind) -> None:
    fake_es.status, fake_es.body = 429, {"error": {"root_cause": [{"type": "es_rejected_execution_exception",
                                                                   "reason": "queue full"}],
                                                   "type": "es_rejected_execution_exception", "reason": "queue full"}}
    es = EngineClient(ClusterSettings(url=fake_es.url, engine=kind, max_retries=0))
    actions = [{"_op_type": "index", "_index": "x", "_id": i, "_source": {"doc_id": i}} for i in "ab"]
    report = write_actions(es, actions, IngestSettings(bulk_max_retries=2), sleep=lambda s: None)
    assert report.retried == 4 and len(fake_es.requests) == 3  # each try one _bulk of both items
    assert [(f.chunk_id, f.status) for f in report.failures] == [("a", 429), ("b", 429)]
    assert "queue full" in report.failures[0].reason


def test_a_scroll_that_missed_a_shard_raises_and_is_cleared(fake_es: Canned) -> None:
    hit = {"_index": "x", "_id": "a", "_source": {}}
    fake_es.paths = {"/x/_search?scroll=5m&size=1000": (200, {"_scroll_id": "s1", "hits": {"hits": [hit]},
                                                             "_shards": {"total": 2, "successful": 1, "failed": 1}})}
    es = EngineClient(ClusterSettings(url=fake_es.url, engine="elasticsearch", max_retries=0))
    got: list[Any] = []
    with pytest.raises(ClusterError, match="scroll over x failed on 1 of 2 shards"):
        got.extend(es.scan(index="x"))
    assert got == [hit]
    assert fake_es.requests == [("POST", "/x/_search?scroll=5m&size=1000"), ("DELETE", "/_search/scroll")]


def test_elasticsearch_is_asked_for_privileges(fake_es: Canned) -> None:
    fake_es.body = {"username": "team-a", "index": {"team-a-chunks*": {"read": True, "write": False},
                                                     "team-a-query-log": {"read": True, "write": False}}}
    es = EngineClient(ClusterSettings(url=fake_es.url, engine="elasticsearch"))
    got = check_privileges(es, ["team-a-chunks*", "team-a-query-log"], ("read", "write"))
    assert got.enforced and got.user == "team-a" and got.unchecked is None
    assert got.missing == {"write": ["team-a-chunks*", "team-a-query-log"]}
    assert fake_es.requests == [("POST", "/_security/user/_has_privileges")]


def test_security_off_leaves_nothing_to_check(fake_es: Canned) -> None:
    fake_es.status, fake_es.body = 500, {"error": {"type": "illegal_state_exception", "reason": "security off"}}
    es = EngineClient(ClusterSettings(url=fake_es.url, engine="elasticsearch", max_retries=0))
    got = check_privileges(es, ["x*"], ("write",))
    assert (got.enforced, got.missing, got.unchecked) == (False, {}, SECURITY_OFF)


def test_refused_credentials_are_an_error_not_a_pass(fake_es: Canned) -> None:
    fake_es.status, fake_es.body = 403, {"error": {"type": "security_exception", "reason": "action [x] is "
                                                   "unauthorized for user [u]"}}
    es = EngineClient(ClusterSettings(url=fake_es.url, engine="elasticsearch", max_retries=0))
    with pytest.raises(AccessDenied):
        check_privileges(es, ["x*"], ("write",))


def test_opensearch_is_not_asked_and_the_doctor_says_why(fake_es: Canned) -> None:
    es = EngineClient(ClusterSettings(url=fake_es.url, engine="opensearch"))
    got = check_privileges(es, ["x*"], ("write",))
    assert (got.enforced, got.unchecked) == (False, NO_API) and fake_es.requests == []
    check = check_access(es, load_settings().index)
    assert (check.status, check.detail) == ("OK", NO_API)


@pytest.mark.parametrize("dialect", [ELASTICSEARCH, OPENSEARCH])
@pytest.mark.parametrize("change", [{}, {"embedding": {"model": "x/other", "dims": 768}},
                                    {"index": {"bm25_unit": "section"}, "chunking": {"max_tokens": 128}}])
def test_the_meta_needs_no_engine(dialect: Dialect, change: dict[str, Any]) -> None:
    s = load_settings(**change)
    assert chunk_meta(s) == load_template("chunks", s, dialect)["template"]["mappings"]["_meta"]
