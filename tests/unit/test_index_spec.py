"""The index specification without a cluster: version names, chunk specs with the
engine's settings, the one fit check, log-index mappings, blocks read as blocks."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from hybridsearch.engine import ELASTICSEARCH, OPENSEARCH, Dialect, EngineInfo
from hybridsearch.errors import AccessDenied, ClusterError, IndexBlocked
from hybridsearch.index_spec.blocks import blocked, item_error
from hybridsearch.index_spec.fit import chunk_differences, log_differences
from hybridsearch.index_spec.names import LOG_KINDS, parse_version, write_alias_name
from hybridsearch.index_spec.spec import chunk_spec, log_spec
from hybridsearch.indices import index_body, mapping_differences
from hybridsearch.lifecycle import version_of
from hybridsearch.settings import load_settings

FANOUT = {"index.dense_vector.hnsw_filter_heuristic": "fanout"}


def test_one_version_parser() -> None:
    assert parse_version("hsp-chunks-v12", "hsp-chunks") == 12
    assert parse_version("hsp-chunks-v12") == 12 == version_of("hsp-chunks-v12")
    for name in ("hsp-chunks", "hsp-chunks-v", "hsp-chunks-v01", "hsp-chunks-v0", "hsp-chunks-v1x", "hsp-chunks-v²"):
        assert parse_version(name, "hsp-chunks") is None, name
    assert parse_version("other-chunks-v3", "hsp-chunks") is None  # another prefix
    assert parse_version("hsp-chunks-old-v3", "hsp-chunks") is None  # not <alias>-v<N>
    assert version_of("hsp-chunks") is None


def test_chunk_spec_carries_the_engine_settings() -> None:
    s = load_settings()
    engine = EngineInfo("elasticsearch", "9.3.2")
    spec = chunk_spec(s, 3, dialect=engine.dialect, engine_settings=engine.chunk_index_settings)
    assert spec.name == "hsp-chunks-v3" and spec.kind == "chunks" and spec.write_alias is None
    assert spec.settings["index.dense_vector.hnsw_filter_heuristic"] == "fanout"
    assert spec.body["settings"]["number_of_replicas"] == s.index.replicas and "aliases" not in spec.body
    older = EngineInfo("elasticsearch", "8.19.8")
    assert "index.dense_vector.hnsw_filter_heuristic" not in chunk_spec(s, 1, dialect=older.dialect,
                                                                       engine_settings=older.chunk_index_settings
                                                                       ).settings
    opensearch = EngineInfo("opensearch", "3.5.0")
    assert chunk_spec(s, 1, dialect=opensearch.dialect,
                      engine_settings=opensearch.chunk_index_settings).settings["knn"] is True
    assert index_body("chunks", s, ELASTICSEARCH)["mappings"] == spec.mappings  # the old name renders the same spec


def test_log_specs_have_their_mappings_and_write_aliases() -> None:
    s = load_settings(index={"prefix": "team-a"})
    specs = {k: log_spec(s, k, ELASTICSEARCH) for k in LOG_KINDS}
    assert [x.name for x in specs.values()] == ["team-a-query-log", "team-a-ingest-runs", "team-a-ingest-state"]
    assert specs["query_log"].body["aliases"] == {"team-a-write-query-log": {"is_write_index": True}}
    assert write_alias_name(s.index, "ingest_runs") == "team-a-write-ingest-runs"
    assert specs["ingest_state"].write_alias is None  # written by name by its own module
    assert specs["query_log"].mappings["properties"]["query"]["fields"]["raw"]["type"] == "keyword"
    assert all(x.mappings["dynamic"] == "strict" for x in specs.values())
    # a search-only role's create_doc pattern <prefix>-*query-log covers the write alias too
    import fnmatch

    assert fnmatch.fnmatch("team-a-write-query-log", "team-a-*query-log")


@pytest.mark.parametrize("dialect", [ELASTICSEARCH, OPENSEARCH])
def test_the_one_fit_check(dialect: Dialect) -> None:
    s = load_settings(index={"analyzer": "standard"})
    mapping = chunk_spec(s, dialect=dialect).mappings
    assert chunk_differences(mapping, s, dialect=dialect) == [] == chunk_differences(mapping, s, dialect=dialect,
                                                                                     level="build")
    assert mapping_differences(mapping, s, dialect=dialect) == []
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
    assert log_differences("query_log", log_spec(s, "query_log", ELASTICSEARCH).mappings, s, ELASTICSEARCH) == []
    diffs = {d[0]: d for d in log_differences("query_log", dynamic_query_log(), s, ELASTICSEARCH)}
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
