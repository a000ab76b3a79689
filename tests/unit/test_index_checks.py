"""Alias resolution and mapping checks, without a cluster (issue 15, items 7 and 8)."""

from __future__ import annotations

import copy

import pytest

from hybridsearch.engine import ELASTICSEARCH as ES
from hybridsearch.errors import AliasConflict, IndexMismatch, IndexNotFound
from hybridsearch.index.fit import check_mapping, chunk_differences
from hybridsearch.index.spec import load_template
from hybridsearch.index.versions import live_target
from hybridsearch.settings import load_settings


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


def test_mapping_differences_compare_the_real_mapping() -> None:
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


def test_doctor_says_what_bm25_scores_and_which_fusion_searches_use() -> None:
    from hybridsearch.doctor.index import retrieval_checks
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
