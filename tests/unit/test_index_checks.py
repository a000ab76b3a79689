"""Alias resolution and mapping checks, without a cluster."""

from __future__ import annotations

import copy

import pytest

from hybridsearch.engine import ELASTICSEARCH as ES
from hybridsearch.errors import AliasConflict, IndexNotFound
from hybridsearch.indices import mapping_differences, single_target
from hybridsearch.mappings import load_template
from hybridsearch.settings import load_settings


def test_single_target() -> None:
    assert single_target("p-chunks", {"p-chunks-v3": {"aliases": {"p-chunks": {}}}}) == "p-chunks-v3"
    with pytest.raises(IndexNotFound, match="alias p-chunks does not exist"):
        single_target("p-chunks", {})
    both = {"p-chunks-v1": {"aliases": {"p-chunks": {}}},
            "p-chunks-v2": {"aliases": {"p-chunks": {"is_write_index": True}}}}
    with pytest.raises(AliasConflict) as caught:
        single_target("p-chunks", both)
    assert caught.value.indices == ("p-chunks-v1", "p-chunks-v2")
    assert "--to-version 2`" in str(caught.value)  # keep the write index
    assert '{"remove": {"index": "p-chunks-v1", "alias": "p-chunks"}}' in str(caught.value)


def test_mapping_differences_compare_the_real_mapping() -> None:
    settings = load_settings()
    mapping = load_template("chunks", settings, ES)["template"]["mappings"]
    assert mapping_differences(mapping, settings, dialect=ES) == []
    older = copy.deepcopy(mapping)
    del older["properties"]["pending_run"]  # built before the field existed: still fits
    assert mapping_differences(older, settings, dialect=ES) == []
    odd = copy.deepcopy(mapping)
    odd["properties"]["embedding"]["dims"] = 768
    odd["properties"]["doc_id"] = {"type": "text"}
    del odd["properties"]["tenant"]
    del odd["properties"]["embedding"]["similarity"]  # Elasticsearch's default is cosine: fits
    assert sorted(mapping_differences(odd, settings, dialect=ES)) == [
        ("doc_id.type", "keyword", "text"), ("embedding.dims", 384, 768), ("tenant.type", "keyword", None)]
    odd["_meta"]["embedding_model"] = "x/other"
    assert ("_meta.embedding_model", settings.embedding.model, "x/other") in mapping_differences(odd, settings,
                                                                                                 dialect=ES)


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
    recorded = {"fusion": Fusion(method="zscore").to_meta(), "fusion_calibration": None}  # by `hsp index fusion`
    check = retrieval_checks(recorded, q)[1]
    assert (check.status, check.detail) == ("OK", "zscore sum, weights bm25 1 / kNN 1, recorded by `hsp index fusion`")
    assert retrieval_checks(recorded, q.model_copy(update={"fusion": "minmax"}))[1].detail == (
        "minmax sum, weights bm25 1 / kNN 1 (settings)")
    unknown = retrieval_checks({"fusion": {"method": "linear", "weights": [1, 1]}}, q)[1]
    assert unknown.status == "FAIL" and unknown.fix is not None and "hsp index fusion" in unknown.fix
