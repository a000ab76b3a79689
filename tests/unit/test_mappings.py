from __future__ import annotations

import json

import pytest

from hybridsearch.engine import ELASTICSEARCH as ES
from hybridsearch.index.spec import TEMPLATES, load_template, mappings_dir
from hybridsearch.settings import load_settings

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


@pytest.mark.parametrize("name", TEMPLATES)
def test_no_placeholder_survives(name: str) -> None:
    rendered = json.dumps(load_template(name, load_settings(), ES))
    assert "${" not in rendered
    assert (mappings_dir() / f"{name}.json").exists()
