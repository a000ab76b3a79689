"""What a sync owns and how much it may delete (no cluster)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hybridsearch.errors import ConfigError
from hybridsearch.ingest.sources import Document, read_path
from hybridsearch.ingest.sync import owned_query, refusal
from hybridsearch.settings import IngestSettings


def test_documents_record_the_resolved_path_of_their_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.md").write_text("# A\n\nSome text.", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    docs = [d for d in read_path("notes") if isinstance(d, Document)]
    assert [(d.doc_id, d.source) for d in docs] == [("a.md", str(tmp_path.resolve() / "notes" / "a.md"))]


def test_a_folder_owns_what_lies_under_it_and_a_file_itself(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "x.jsonl").write_text("{}", encoding="utf-8")
    folder = owned_query(tmp_path / "src", None)["bool"]["filter"]
    assert folder == [{"prefix": {"source": f"{tmp_path.as_posix()}/src/"}}]  # not src-more/
    file = owned_query(tmp_path / "x.jsonl", "team-a")["bool"]["filter"]
    assert file == [{"term": {"source": str(tmp_path / "x.jsonl")}}, {"term": {"tenant": "team-a"}}]


def test_the_delete_share_guard() -> None:
    cfg = IngestSettings(sync_max_delete=0.2)
    root = Path("/data/src")
    assert refusal(root, 1, 5, cfg) is None and refusal(root, 0, 0, cfg) is None
    assert refusal(root, 1, 1, IngestSettings(sync_max_delete=0.0)) is not None
    err = refusal(root, 2, 5, cfg)
    assert isinstance(err, ConfigError) and "would delete 2 of its 5 documents" in str(err)
    assert "\n" not in str(err)
