from __future__ import annotations

from typing import cast

import numpy as np
import pytest

from hybridsearch.engine import API_ERRORS, EngineClient, cluster_info, request, status_of
from hybridsearch.errors import ClusterUnavailable, IndexMismatch
from hybridsearch.index.logs import ensure_log_indices
from hybridsearch.index.spec import has_analyzer
from hybridsearch.index.versions import checked_live_index, ensure_index, index_meta, read_alias
from hybridsearch.settings import Settings, load_settings


def _vec(seed: int, dims: int = 384) -> list[float]:
    v = np.random.default_rng(seed).normal(size=dims)
    return cast(list[float], (v / np.linalg.norm(v)).tolist())  # 1-D float64 array → list of floats


def test_cluster_info_reports_version(es: EngineClient, engine_under_test: tuple[str, str]) -> None:
    info = cluster_info(es)
    kind, version = engine_under_test
    assert info["status"] in {"green", "yellow"} and info["engine"] == es.engine.kind == kind
    assert all(v.startswith(version) for v in info["versions"]) and es.engine.version in info["versions"]


def test_ensure_index_is_idempotent_and_alias_points_at_it(es: EngineClient, settings: Settings) -> None:
    name = ensure_index(es, settings)
    assert name == f"{settings.index.prefix}-chunks-v1"
    assert ensure_index(es, settings) == name
    assert sorted(read_alias(es, settings.index.alias)) == [name]
    assert checked_live_index(es, settings) == name
    meta = index_meta(es, name)
    assert meta["embedding_model"] == settings.embedding.model and meta["embedding_dims"] == 384
    mapping = es.send(request.get_mapping(name))[name]["mappings"]["properties"]["embedding"]
    vector = es.dialect.vector_summary(mapping)
    assert vector.options["type"] == "int8_hnsw" and (vector.dims, vector.similarity) == (384, "cosine")


def test_write_and_search_bm25_and_knn(es: EngineClient, settings: Settings) -> None:
    name = ensure_index(es, settings)
    docs = {"a": ("Cats purr", "The domestic cat purrs when content."), "b": ("Dogs bark", "A dog barks at strangers.")}
    for i, (doc_id, (title, text)) in enumerate(docs.items()):
        es.send(request.put_doc(name, f"{doc_id}#0", {"doc_id": doc_id, "chunk_id": f"{doc_id}#0", "title": title,
                 "text": text, "embedding": _vec(i), "position": 0, "metadata": {"lang": "en"}}))
    es.send(request.refresh(name))
    bm25 = es.send(request.search(settings.index.alias, request.body(query={"match": {"text": "dog barks"}})))
    assert [h["_source"]["doc_id"] for h in bm25["hits"]["hits"]] == ["b"]
    knn = es.send(request.search(settings.index.alias, request.body(**es.dialect.knn_search("embedding", _vec(0), 1,
                                                                                            10, []))))
    assert knn["hits"]["hits"][0]["_source"]["doc_id"] == "a"


def test_mismatched_meta_is_refused(es: EngineClient, settings: Settings) -> None:
    ensure_index(es, settings)
    other = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"model": "other/model"})})
    with pytest.raises(IndexMismatch, match="other/model"):
        ensure_index(es, other)


def test_unreachable_cluster_is_our_error() -> None:
    client = EngineClient(load_settings(es_url="http://127.0.0.1:1", es={"max_retries": 0}).es)
    with pytest.raises(ClusterUnavailable, match=r"es-local\.sh"):
        cluster_info(client)


def test_log_indices_are_created_or_brought_up_to_date(es: EngineClient, settings: Settings) -> None:
    #IMPORTS#

    runs, log = settings.index.ingest_runs, settings.index.query_log
    es.send(request.create_index(runs, mappings={"dynamic": "strict", "properties": {"run_id": {"type": "keyword"}}}))
    ensure_log_indices(es, settings)
    props = es.send(request.get_mapping(runs))[runs]["mappings"]["properties"]
    assert {"run_id", "documents", "chunks_per_second"} <= set(props)
    created = es.send(request.get_mapping(log))[log]["mappings"]  # made with its explicit mappings
    assert created["dynamic"] == "strict" and {"query_hash", "latency_ms"} <= set(created["properties"])
    # no index template is involved (none is needed, so no cluster privilege to write one)
    assert not es.send(request.Request("GET", f"/_index_template/{settings.index.prefix}-*",
                                       absent={"index_templates": []})).get("index_templates")


def test_new_indices_get_english_analysis_where_the_cluster_has_it(es: EngineClient, settings: Settings) -> None:
    """``HSP_INDEX__ANALYZER=auto``: english where the node has it (OpenSearch's zip and Docker images carry
    analysis-common; Elasticsearch's integ-test zip does not), else standard; the choice is in the mapping and in
    ``_meta``. Whether the node has it is asked of the node itself, as a superuser, with ``_analyze``."""
    try:
        es.send(request.analyze("probe", analyzer="english"))
        english = True
    except API_ERRORS as exc:
        assert status_of(exc) == 400, exc  # "failed to find global analyzer [english]"
        english = False
    assert has_analyzer(es, "english") == english
    name = ensure_index(es, settings)
    props = es.send(request.get_mapping(name))[name]["mappings"]["properties"]
    want = "english" if english else "standard"
    assert props["text"]["analyzer"] == props["title"]["analyzer"] == index_meta(es, name)["analyzer"] == want
    tokens = es.send(request.analyze("Running studies", index=name, field="text"))
    assert [t["token"] for t in tokens["tokens"]] == (["run", "studi"] if english else ["running", "studies"])
