"""The engine seam without a cluster: dialect rendering and read-back, engine detection against a stand-in."""

from __future__ import annotations

from typing import Any

import pytest

from hybridsearch.engine import ELASTICSEARCH, OPENSEARCH, EngineClient, EngineInfo, request
from hybridsearch.errors import ConfigError
from hybridsearch.index.spec import chunk_differences, load_template
from hybridsearch.settings import ClusterSettings, load_settings
from standin import Canned


def chunks(dialect: Any, **index: Any) -> dict[str, Any]:
    template: dict[str, Any] = load_template("chunks", load_settings(index=index), dialect)["template"]
    return template


def test_opensearch_chunk_index_is_knn_vector_on_lucene_with_int8() -> None:
    body = chunks(OPENSEARCH)
    assert body["settings"]["knn"] is True
    props = body["mappings"]["properties"]
    assert props["metadata"] == {"type": "flat_object"}
    assert props["embedding"] == {
        "type": "knn_vector", "dimension": 384,
        "method": {"name": "hnsw", "engine": "lucene", "space_type": "cosinesimil",
                   "parameters": {"m": 16, "ef_construction": 100, "encoder": {"name": "sq"}}}}
    plain = chunks(OPENSEARCH, index_options="hnsw", similarity="dot_product")["mappings"]["properties"]["embedding"]
    assert "encoder" not in plain["method"]["parameters"] and plain["method"]["space_type"] == "innerproduct"


def test_elasticsearch_chunk_index_is_dense_vector_with_explicit_options() -> None:
    body = chunks(ELASTICSEARCH)
    assert "knn" not in body["settings"]
    props = body["mappings"]["properties"]
    assert props["metadata"] == {"type": "flattened"}
    assert props["embedding"] == {"type": "dense_vector", "dims": 384, "index": True, "similarity": "cosine",
                                  "index_options": {"type": "int8_hnsw", "m": 16, "ef_construction": 100}}


@pytest.mark.parametrize("options", ["int4_hnsw", "bbq_hnsw", "flat", "int8_flat"])
def test_opensearch_refuses_options_lucene_cannot_serve(options: str) -> None:
    with pytest.raises(ConfigError, match=f"index_options {options} has no equivalent.*lucene"):
        chunks(OPENSEARCH, index_options=options)


@pytest.mark.parametrize("dialect", [ELASTICSEARCH, OPENSEARCH])
def test_vector_summary_reads_back_what_was_rendered(dialect: Any) -> None:
    for options, similarity in (("hnsw", "cosine"), ("int8_hnsw", "dot_product")):
        settings = load_settings(index={"index_options": options, "similarity": similarity})
        prop = load_template("chunks", settings, dialect)["template"]["mappings"]["properties"]["embedding"]
        summary = dialect.vector_summary(prop)
        assert (summary.is_vector, summary.dims, summary.similarity) == (True, 384, similarity)
        assert summary.options["type"] == options and summary.options["m"] == 16
        mapping = load_template("chunks", settings, dialect)["template"]["mappings"]
        assert chunk_differences(mapping, settings, dialect=dialect) == []
    other = load_settings(index={"similarity": "dot_product"})
    mapping = load_template("chunks", load_settings(), dialect)["template"]["mappings"]
    assert chunk_differences(mapping, other, dialect=dialect) == [("embedding.similarity", "dot_product", "cosine")]


def test_faiss_and_on_disk_indices_are_named_unsafe() -> None:
    faiss = OPENSEARCH.vector_summary({"type": "knn_vector", "dimension": 384,
                                       "method": {"name": "hnsw", "engine": "faiss", "space_type": "l2"}})
    assert "faiss" in (faiss.unsafe_options or "") and faiss.similarity == "l2"
    on_disk = OPENSEARCH.vector_summary({"type": "knn_vector", "dimension": 384, "mode": "on_disk"})
    assert "on_disk" in (on_disk.unsafe_options or "")
    assert OPENSEARCH.vector_summary(chunks(OPENSEARCH)["mappings"]["properties"]["embedding"]).unsafe_options is None


@pytest.mark.parametrize(("body", "kind", "version"), [
    ({"version": {"distribution": "opensearch", "number": "3.5.0"}}, "opensearch", "3.5.0"),
    ({"version": {"number": "8.19.8", "build_flavor": "default"}}, "elasticsearch", "8.19.8"),
])
def test_detection_reads_get_root(fake_es: Canned, body: dict[str, Any], kind: str, version: str) -> None:
    fake_es.body = body
    es = EngineClient(ClusterSettings(url=fake_es.url))
    assert (es.engine.kind, es.engine.version) == (kind, version)
    assert es.engine.dialect is (OPENSEARCH if kind == "opensearch" else ELASTICSEARCH)
    assert fake_es.requests == [("GET", "/")]


def test_engine_setting_skips_detection(fake_es: Canned) -> None:
    es = EngineClient(ClusterSettings(url=fake_es.url, engine="opensearch"))
    assert es.engine == EngineInfo("opensearch", None) and fake_es.requests == []


@pytest.mark.parametrize(("kind", "version", "ok"), [
    ("elasticsearch", "8.11.4", False), ("elasticsearch", "8.12.0", True), ("elasticsearch", "9.3.2", True),
    ("opensearch", "2.15.0", False), ("opensearch", "3.5.0", True)])
def test_too_old_engines_are_named(kind: Any, version: str, ok: bool) -> None:
    problem = EngineInfo(kind, version).support_problem()
    assert (problem is None) is ok
    if not ok:
        assert problem is not None and f"{version} is not supported" in problem


def test_vectors_are_asked_for_in_source_on_elasticsearch_9_only() -> None:
    assert EngineInfo("elasticsearch", "9.3.2").source_with_vectors == {"exclude_vectors": False}
    assert EngineInfo("elasticsearch", "8.19.8").source_with_vectors is True
    assert EngineInfo("opensearch", "3.5.0").source_with_vectors is True


def test_opensearch_refuses_api_keys(fake_es: Canned) -> None:
    fake_es.body = {"version": {"distribution": "opensearch", "number": "3.5.0"}}
    es = EngineClient(ClusterSettings(url=fake_es.url, api_key="aWQ6a2V5"))
    with pytest.raises(ConfigError, match="OpenSearch has no API keys"):
        es.send(request.index_exists("x"))


def test_filtered_knn_explores_the_graph_without_acorn_where_elasticsearch_has_acorn() -> None:
    fanout = {"index.dense_vector.hnsw_filter_heuristic": "fanout"}
    assert EngineInfo("elasticsearch", "9.3.2").chunk_index_settings == fanout
    assert EngineInfo("elasticsearch", "9.1.0").chunk_index_settings == fanout
    for older in (EngineInfo("elasticsearch", "9.0.4"), EngineInfo("elasticsearch", "8.19.8"),
                  EngineInfo("opensearch", "3.5.0")):
        assert older.chunk_index_settings == {}  # the setting is unknown there: creating the index would fail


@pytest.mark.parametrize(("version", "newer"), [("9.3.2", True), ("9.1.0", True), ("9.0.4", False),
                                                ("8.19.8", False), (None, True)])
def test_one_rule_for_the_version_and_an_unknown_version_counts_as_the_newest(version: str | None,
                                                                              newer: bool) -> None:
    # HSP_ES__ENGINE leaves the version unknown: both version-dependent answers read it the same way
    engine = EngineInfo("elasticsearch", version)
    assert engine.at_least(9, 1) is newer
    assert (engine.source_with_vectors == {"exclude_vectors": False}) is newer
    assert (engine.chunk_index_settings == {"index.dense_vector.hnsw_filter_heuristic": "fanout"}) is newer
    assert engine.support_problem() is None and engine.at_least(8, 12)
    assert EngineInfo("opensearch", None).support_problem() is None


def test_msearch_and_bulk_bodies_are_written_with_orjson_numpy_vectors_included() -> None:
    import json

    import numpy as np
    import orjson

    from hybridsearch.engine.client import SERIALIZERS

    vector = np.array([0.5, -0.25, 1e-8], dtype=np.float32)
    lines = SERIALIZERS["application/x-ndjson"].dumps([{"index": "a"}, {"knn": {"query_vector": vector}},
                                                       {"v": list(vector)}])
    assert [json.loads(x) for x in lines.splitlines()] == [
        {"index": "a"}, {"knn": {"query_vector": [0.5, -0.25, 1e-8]}}, {"v": [0.5, -0.25, 1e-8]}]
    for kind in ("elasticsearch", "opensearch"):
        es = EngineClient(ClusterSettings(url="http://127.0.0.1:1", engine=kind))
        for mimetype in ("application/json", "application/x-ndjson"):
            assert es.transport.serializers.get_serializer(mimetype).json_dumps({"a": vector}) == orjson.dumps(
                {"a": vector}, option=orjson.OPT_SERIALIZE_NUMPY)
        es.close()
