"""One read path: search builds it into both lists, and no module reads chunks around it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import hybridsearch
from hybridsearch.engine import ELASTICSEARCH
from hybridsearch.index.visibility import hidden_lookup, state_index_for, visible_filter
from hybridsearch.query.build import knn_body, list_search, plan
from hybridsearch.settings import QuerySettings

PACKAGE = Path(hybridsearch.__file__).parent
#: modules allowed to scroll over an index themselves: the read path, the seam, and the writer's own look-ups
SCANNERS = {"index/visibility.py", "engine/client.py", "ingest/commit.py"}


def test_every_list_of_a_search_excludes_hidden_documents() -> None:
    q = QuerySettings()
    p = plan(q, None, "lungs", state_index="team-ingest-state")
    lines = list_search(q, "team-chunks", p, "all", [0.0] * 4, ELASTICSEARCH)
    bodies = [line for line in lines if "index" not in line]
    assert len(bodies) == 2
    for body in bodies:
        assert json.dumps(hidden_lookup("team-ingest-state")) in json.dumps(body)
    assert visible_filter("team-ingest-state") in knn_body(q, p, [0.0] * 4, ELASTICSEARCH)["knn"]["filter"]


def test_no_module_scrolls_chunks_around_the_read_path() -> None:
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "scan" \
                    and rel not in SCANNERS:
                offenders.append(f"{rel}:{node.lineno}")
            if isinstance(node, ast.Constant) and node.value == "match_all":
                offenders.append(f"{rel}:{node.lineno} match_all")
    assert offenders == []


def test_the_state_index_follows_from_any_chunk_index_name() -> None:
    assert state_index_for("team-a-chunks") == "team-a-ingest-state"
    assert state_index_for("team-a-chunks-v12") == "team-a-ingest-state"
    with pytest.raises(ValueError):
        state_index_for("team-a-query-log")


def test_nothing_reads_or_maps_the_staging_field_of_an_earlier_protocol() -> None:
    from hybridsearch.index.spec import mappings_dir

    files = [*PACKAGE.rglob("*.py"), *mappings_dir().glob("*.json")]
    assert len(files) > 100
    assert [p.name for p in files if "pending_run" in p.read_text(encoding="utf-8")] == []
