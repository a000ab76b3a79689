"""One read path: search builds it into every list it sends."""

from __future__ import annotations

import json

import pytest

from hybridsearch.engine import ELASTICSEARCH
from hybridsearch.index.visibility import hidden_lookup, state_index_for, visible_filter
from hybridsearch.query.build import Bm25Scope, knn_lines, plan, text_lines
from hybridsearch.settings import QuerySettings


def test_every_list_of_a_search_excludes_hidden_documents() -> None:
    q = QuerySettings()
    p = plan(q, None, "lungs", state_index="team-ingest-state")
    lines = text_lines(q, "team-chunks", p, Bm25Scope(sections=True)) + knn_lines(q, "team-chunks", p, [0.0] * 4,
                                                                                ELASTICSEARCH)
    bodies = [line for line in lines if "index" not in line]
    assert len(bodies) == 3  # BM25, its passage list, kNN
    for body in bodies:
        assert json.dumps(hidden_lookup("team-ingest-state")) in json.dumps(body)
    assert visible_filter("team-ingest-state") in lines[-1]["knn"]["filter"]


def test_the_state_index_follows_from_any_chunk_index_name() -> None:
    assert state_index_for("team-a-chunks") == "team-a-ingest-state"
    assert state_index_for("team-a-chunks-v12") == "team-a-ingest-state"
    with pytest.raises(ValueError):
        state_index_for("team-a-query-log")
