"""The index package without a cluster: the templates rendered from settings, version and log names, specs with the
engine's settings, the one fit check and the refusal of an index of another format, the live-index decision, write
blocks read as blocks."""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

import pytest

from hybridsearch.engine import ELASTICSEARCH as ES
from hybridsearch.engine import OPENSEARCH, Dialect, EngineInfo
from hybridsearch.errors import AccessDenied, AliasConflict, ClusterError, IndexBlocked, IndexMismatch, IndexNotFound
from hybridsearch.index.access import blocked, item_error
from hybridsearch.index.spec import (
    LOG_KINDS,
    check_mapping,
    check_source,
    chunk_differences,
    chunk_spec,
    chunk_spec_for,
    follow_index,
    load_template,
    log_differences,
    log_spec,
    mappings_dir,
    parse_version,
    write_alias_name,
)
from hybridsearch.index.versions import live_target
from hybridsearch.settings import EmbeddingSettings, load_settings

# Every field the query layer reads or filters on.
QUERY_FIELDS = {"doc_id", "chunk_id", "parent_id", "parent_text", "title", "text", "embedding", "source",
                "metadata", "tenant", "ingested_at", "position", "content_hash"}


def test_chunks_template_renders_from_settings() -> None:
    s = load_settings(embedding={"dims": 768, "model": "some/model"}, index={"similarity": "dot_product",
                      "analyzer": "english", "prefix": "team", "index_options": "hnsw", "hnsw_m": 32})
    t = load_template("chunks", s, ES)
    props = t["template"]["mappings"]["properties"]
    assert "index_patterns" not in t  # created explicitly, never installed as an index template
    assert props["embedding"]["dims"] == 768
    assert props["embedding"]["similarity"] == "dot_product"
    assert props["embedding"]["index_options"] == {"type": "hnsw", "m": 32, "ef_construction": 100}
    assert props["text"]["analyzer"] == props["title"]["analyzer"] == "english"
    meta = t["template"]["mappings"]["_meta"]
    assert meta["embedding_model"] == "some/model" and meta["embedding_dims"] == 768
    assert meta["chunker_version"].startswith(s.chunking.strategy)


def test_default_vector_options_are_explicit_int8() -> None:
    props = load_template("chunks", load_settings(), ES)["template"]["mappings"]["properties"]
    assert props["embedding"]["index_options"]["type"] == "int8_hnsw"
    assert props["embedding"]["similarity"] == "cosine"


def test_every_query_field_is_mapped() -> None:
    props = load_template("chunks", load_settings(), ES)["template"]["mappings"]["properties"]
    assert set(props) >= QUERY_FIELDS


@pytest.mark.parametrize("name", ["chunks", *LOG_KINDS])
def test_no_placeholder_survives(name: str) -> None:
    rendered = json.dumps(load_template(name, load_settings(), ES))
    assert "${" not in rendered
    assert (mappings_dir() / f"{name}.json").exists()


def test_one_version_parser() -> None:
    assert parse_version("hsp-chunks-v12", "hsp-chunks") == 12
    assert parse_version("hsp-chunks-v12") == 12
    for name in ("hsp-chunks", "hsp-chunks-v", "hsp-chunks-v01", "hsp-chunks-v0", "hsp-chunks-v1x", "hsp-chunks-v²"):
        assert parse_version(name, "hsp-chunks") is None, name
    assert parse_version("other-chunks-v3", "hsp-chunks") is None  # another prefix
    assert parse_version("hsp-chunks-old-v3", "hsp-chunks") is None  # not <alias>-v<N>
    assert parse_version("hsp-chunks") is None


def test_chunk_spec_carries_the_engine_settings() -> None:
    s = load_settings()
    engine = EngineInfo("elasticsearch", "9.3.2")
    spec = chunk_spec(s, 3, dialect=engine.dialect, engine_settings=engine.chunk_index_settings)
    assert spec.name == "hsp-chunks-v3" and spec.write_alias is None
    assert spec.settings["index.dense_vector.hnsw_filter_heuristic"] == "fanout"
    assert spec.body["settings"]["number_of_replicas"] == s.index.replicas and "aliases" not in spec.body
    older = EngineInfo("elasticsearch", "8.19.8")
    assert "index.dense_vector.hnsw_filter_heuristic" not in chunk_spec(s, 1, dialect=older.dialect,
                                                                       engine_settings=older.chunk_index_settings
                                                                       ).settings
    opensearch = EngineInfo("opensearch", "3.5.0")
    assert chunk_spec(s, 1, dialect=opensearch.dialect,
                      engine_settings=opensearch.chunk_index_settings).settings["knn"] is True


@pytest.mark.parametrize(("kind", "version", "derived_source"), [
    ("opensearch", "3.5.0", False), ("opensearch", "2.19.1", None), ("elasticsearch", "9.3.2", None)])
def test_new_chunk_indices_turn_off_knn_derived_source_on_opensearch_3(kind: str, version: str,
                                                                      derived_source: bool | None) -> None:
    engine = EngineInfo(kind, version)
    cluster = SimpleNamespace(engine=engine, dialect=engine.dialect)
    spec = chunk_spec_for(cluster, load_settings(index={"analyzer": "standard"}))
    assert spec.settings.get("index.knn.derived_source.enabled") == derived_source


def test_log_specs_have_their_mappings_and_write_aliases() -> None:
    s = load_settings(index={"prefix": "team-a"})
    specs = {k: log_spec(s, k, ES) for k in LOG_KINDS}
    assert [x.name for x in specs.values()] == ["team-a-query-log", "team-a-ingest-runs", "team-a-ingest-state"]
    assert specs["query_log"].body["aliases"] == {"team-a-write-query-log": {"is_write_index": True}}
    assert write_alias_name(s.index, "ingest_runs") == "team-a-write-ingest-runs"
    assert specs["ingest_state"].write_alias == "team-a-write-ingest-state"
    assert specs["query_log"].mappings["properties"]["query"]["fields"]["raw"]["type"] == "keyword"
    assert all(x.mappings["dynamic"] == "strict" for x in specs.values())
    # a search-only role's create_doc pattern <prefix>-*query-log covers the write alias too
    import fnmatch

    assert fnmatch.fnmatch("team-a-write-query-log", "team-a-*query-log")


@pytest.mark.parametrize("dialect", [ES, OPENSEARCH])
def test_the_one_fit_check(dialect: Dialect) -> None:
    s = load_settings(index={"analyzer": "standard"})
    mapping = chunk_spec(s, dialect=dialect).mappings
    assert chunk_differences(mapping, s, dialect=dialect) == [] == chunk_differences(mapping, s, dialect=dialect,
                                                                                     level="build")
    other = load_settings(index={"analyzer": "english", "index_options": "hnsw"}, chunking={"max_tokens": 128})
    assert chunk_differences(mapping, other, dialect=dialect) == []  # can serve: same model, dims, fields
    build = {d[0] for d in chunk_differences(mapping, other, dialect=dialect, level="build")}
    assert build == {"_meta.chunker_version", "analyzer", "embedding.index_options"}
    odd = copy.deepcopy(mapping)
    odd["properties"]["doc_id"] = {"type": "text"}
    assert ("doc_id.type", "keyword", "text") in chunk_differences(odd, s, dialect=dialect)


def dynamic_query_log() -> dict[str, Any]:
    """What a write made of the query log before: guessed mappings."""
    text = {"type": "text", "fields": {"keyword": {"type": "keyword", "ignore_above": 256}}}
    return {"properties": {"query": text, "mode": text, "k": {"type": "long"}}}


def test_log_differences_find_a_guessed_mapping() -> None:
    s = load_settings()
    assert log_differences("query_log", log_spec(s, "query_log", ES).mappings, s, ES) == []
    diffs = {d[0]: d for d in log_differences("query_log", dynamic_query_log(), s, ES)}
    assert diffs["dynamic"] == ("dynamic", "strict", None)
    assert diffs["mode.type"] == ("mode.type", "keyword", "text")
    assert diffs["query.raw.type"] == ("query.raw.type", "keyword", None)
    assert diffs["k.type"] == ("k.type", "integer", "long")
    assert diffs["latency_ms.type"][2] is None


@pytest.mark.parametrize(("reason", "block", "fix"), [
    ("index [hsp-ingest-runs] blocked by: [FORBIDDEN/8/index write (api)];", "index.blocks.write",
     'PUT hsp-ingest-runs/_settings {"index.blocks.write": null}'),
    ("index [hsp-ingest-runs] blocked by: [TOO_MANY_REQUESTS/12/disk usage exceeded flood-stage watermark, index "
     "has read-only-allow-delete block];", "index.blocks.read_only_allow_delete", "free disk space"),
    ("index [hsp-ingest-runs] blocked by: [FORBIDDEN/5/index read-only (api)];", "index.blocks.read_only",
     'PUT hsp-ingest-runs/_settings {"index.blocks.read_only": null}'),
    ("blocked by: [FORBIDDEN/6/cluster read-only (api)];", "cluster.blocks.read_only", "PUT _cluster/settings"),
])
def test_a_block_is_a_block(reason: str, block: str, fix: str) -> None:
    err = blocked(reason, "hsp-ingest-runs", "store ingest run")
    assert isinstance(err, IndexBlocked) and isinstance(err, ClusterError) and not isinstance(err, AccessDenied)
    assert err.block.startswith(block) and fix in str(err.fix)
    assert "credential" not in str(err).lower()


def test_a_blocked_bulk_item_is_a_block_not_credentials() -> None:
    item = {"_index": "hsp-ingest-runs", "_id": "r1", "status": 403,
            "error": {"type": "cluster_block_exception",
                      "reason": "index [hsp-ingest-runs] blocked by: [FORBIDDEN/8/index write (api)];"}}
    err = item_error(item, "hsp-ingest-runs", "write 1 document(s) to hsp-ingest-runs")
    assert isinstance(err, IndexBlocked) and err.index == "hsp-ingest-runs" and err.block == "index.blocks.write"
    other = item_error({"status": 400, "error": {"type": "strict_dynamic_mapping_exception", "reason": "no field x"}},
                       "hsp-query-log", "write")
    assert type(other) is ClusterError and "strict_dynamic_mapping_exception" in str(other)


def test_live_target() -> None:
    assert live_target("p-chunks", {"p-chunks-v3": {"aliases": {"p-chunks": {}}}}) == "p-chunks-v3"
    with pytest.raises(IndexNotFound, match="alias p-chunks does not exist"):
        live_target("p-chunks", {})
    both = {"p-chunks-v1": {"aliases": {"p-chunks": {}}},
            "p-chunks-v2": {"aliases": {"p-chunks": {"is_write_index": True}}}}
    with pytest.raises(AliasConflict) as caught:
        live_target("p-chunks", both)
    assert caught.value.indices == ("p-chunks-v1", "p-chunks-v2")
    assert "--to-version 2`" in str(caught.value)  # keep the write index
    assert '{"remove": {"index": "p-chunks-v1", "alias": "p-chunks"}}' in str(caught.value)


def test_chunk_differences_compare_the_real_mapping() -> None:
    settings = load_settings()
    mapping = load_template("chunks", settings, ES)["template"]["mappings"]
    assert chunk_differences(mapping, settings, dialect=ES) == []
    assert "pending_run" not in mapping["properties"]
    odd = copy.deepcopy(mapping)
    odd["properties"]["embedding"]["dims"] = 768
    odd["properties"]["doc_id"] = {"type": "text"}
    del odd["properties"]["tenant"]
    del odd["properties"]["embedding"]["similarity"]  # Elasticsearch's default is cosine: fits
    assert sorted(chunk_differences(odd, settings, dialect=ES)) == [
        ("doc_id.type", "keyword", "text"), ("embedding.dims", 384, 768), ("tenant.type", "keyword", None)]
    odd["_meta"]["embedding_model"] = "x/other"
    assert ("_meta.embedding_model", settings.embedding.model, "x/other") in chunk_differences(odd, settings,
                                                                                               dialect=ES)


def test_an_index_of_another_format_is_refused_with_the_migration_as_fix() -> None:
    settings = load_settings()
    mapping = load_template("chunks", settings, ES)["template"]["mappings"]
    check_mapping("p-chunks-v1", mapping, settings, ES)  # what create makes fits
    older = copy.deepcopy(mapping)
    older["_meta"]["schema_version"] = 1
    older["properties"]["pending_run"] = {"type": "keyword"}
    del older["properties"]["section_all"]
    assert chunk_differences(older, settings, dialect=ES) == [("_meta.schema_version", 2, 1)]
    with pytest.raises(IndexMismatch, match="another format") as caught:
        check_mapping("p-chunks-v1", older, settings, ES)
    assert caught.value.fix is not None and "`hsp index migrate`" in caught.value.fix
    assert caught.value.differences == (("_meta.schema_version", 2, 1),)
    del older["_meta"]["schema_version"]
    with pytest.raises(IndexMismatch, match="another format"):
        check_mapping("p-chunks-v1", older, settings, ES)
    check_source("p-chunks-v1", older, settings, ES)  # a migration reads it for its model only
    older["_meta"]["embedding_model"] = "x/other"
    with pytest.raises(IndexMismatch, match="embedding_model"):
        check_source("p-chunks-v1", older, settings, ES)


def test_doctor_says_what_bm25_scores_and_which_fusion_searches_use() -> None:
    from hybridsearch.doctor import retrieval_checks
    from hybridsearch.query.fusion import Fusion
    from hybridsearch.settings import QuerySettings

    q = QuerySettings()
    bm25, fusion = retrieval_checks({"bm25_unit": "section", "section_words": 1000}, q)
    assert (bm25.status, fusion.status) == ("OK", "OK") and "1000 words" in bm25.detail
    assert fusion.fix is not None and "calibrate-fusion" in fusion.fix  # nothing calibrated: say how
    bm25, _ = retrieval_checks({}, q)
    assert bm25.status == "WARN" and bm25.fix is not None and "migrate" in bm25.fix
    meta = {"fusion": Fusion(k=10).to_meta(), "fusion_calibration": {"dataset": "scifact", "split": "train"}}
    assert "calibrated on scifact train" in retrieval_checks(meta, q)[1].detail
    assert retrieval_checks({"fusion": {"method": "rrf"}}, q)[1].status == "FAIL"
    recorded = {"fusion": Fusion(method="zscore").to_meta(), "fusion_calibration": None}  # by `hsp index fusion`
    check = retrieval_checks(recorded, q)[1]
    assert (check.status, check.detail) == ("OK", "zscore sum, weights bm25 1 / kNN 1, recorded by `hsp index fusion`")
    assert retrieval_checks(recorded, q.model_copy(update={"fusion": "minmax"}))[1].detail == (
        "minmax sum, weights bm25 1 / kNN 1 (settings)")
    unknown = retrieval_checks({"fusion": {"method": "linear", "weights": [1, 1]}}, q)[1]
    assert unknown.status == "FAIL" and unknown.fix is not None and "hsp index fusion" in unknown.fix


def test_a_client_without_a_model_follows_the_index_and_an_explicit_one_is_kept() -> None:
    meta = {"embedding_model": "bge-small-en-v1.5", "embedding_dims": 384}
    unset = EmbeddingSettings()
    followed = follow_index(unset, meta)
    assert (followed.model, followed.dims) == ("bge-small-en-v1.5", 384)
    assert follow_index(EmbeddingSettings(model="other/model"), meta).model == "other/model"
    assert follow_index(unset, {}) == unset  # a new index gets the default
    small = follow_index(EmbeddingSettings(), {"embedding_model": "tiny", "embedding_dims": 32})
    assert (small.model, small.dims) == ("tiny", 32)
    assert follow_index(EmbeddingSettings(dims=64), {"embedding_model": "tiny", "embedding_dims": 32}).dims == 64
