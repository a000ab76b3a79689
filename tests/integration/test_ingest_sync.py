"""Ingestion that mirrors its source (``hsp ingest SOURCE --sync``) on a real node: deletes what the source no
longer holds, only its own documents, only when it read the source whole, and not too many without --force."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hybridsearch.cli.main import main
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import ConfigError
from hybridsearch.index.visibility import STATE_ID, visible_query
from hybridsearch.ingest.lease import IngestResult
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.settings import Settings


def _tiny(settings: Settings, tiny_dir: Path, **ingest: Any) -> Settings:
    return settings.model_copy(update={
        "embedding": settings.embedding.model_copy(update={"model": str(tiny_dir), "dims": 32, "batch_size": 8}),
        "ingest": settings.ingest.model_copy(update=ingest),
    })


def _visible(es: EngineClient, s: Settings) -> dict[str, str]:
    """``{doc_id: text of chunk 0}`` of every visible document. The search names the fields it reads, as the query
    layer does: OpenSearch 3.x rebuilds a k-NN vector into ``_source`` on the fly and fails a whole-``_source``
    fetch from a segment that holds deleted documents."""
    es.send(request.refresh(s.index.alias))
    query = visible_query(s.index.ingest_state, [{"term": {"position": 0}}])
    body = request.body(query=query, size=1000, source=["doc_id", "text"])
    hits = es.send(request.search(s.index.alias, body))["hits"]["hits"]
    return {h["_source"]["doc_id"]: h["_source"]["text"] for h in hits}


def _folder(root: Path, names: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        (root / name).write_text(f"The note called {name} says something about {name}.\n", encoding="utf-8")
    return root


def _sync(path: Path, s: Settings, es: EngineClient, emb: Embedder, **kw: Any) -> IngestResult:
    return run_ingest(path, s, es=es, embedder=emb, sync=True, **kw)


def test_a_folder_sync_deletes_changes_and_adds(es: EngineClient, settings: Settings, tiny_bi_encoder: Path,
                                                tmp_path: Path) -> None:
    s = _tiny(settings, tiny_bi_encoder)
    emb = Embedder(s.embedding, s.models)
    src = _folder(tmp_path / "notes", [f"n{i}.md" for i in range(6)])
    first = _sync(src, s, es, emb)
    assert first.documents_indexed == 6 and first.documents_deleted == 0
    (src / "n0.md").unlink()
    (src / "n1.md").write_text("The note n1 now says something new.\n", encoding="utf-8")
    _folder(src, ["n6.md"])
    second = _sync(src, s, es, emb)
    assert (second.documents_indexed, second.documents_deleted, second.documents_skipped) == (2, 1, 4)
    assert second.deleted >= 1 and second.sync_withheld is None
    seen = _visible(es, s)
    assert sorted(seen) == ["n1.md", "n2.md", "n3.md", "n4.md", "n5.md", "n6.md"]
    assert "something new" in seen["n1.md"]
    es.send(request.refresh(s.index.ingest_runs))
    record = es.send(request.get_doc(s.index.ingest_runs, second.run_id))["_source"]
    assert record["documents_deleted"] == 1
    assert es.send(request.count(s.index.alias, {"term": {"doc_id": "n0.md"}}))["count"] == 0


def test_two_sources_in_one_prefix_keep_their_own(es: EngineClient, settings: Settings, tiny_bi_encoder: Path,
                                                  tmp_path: Path) -> None:
    s = _tiny(settings, tiny_bi_encoder)
    emb = Embedder(s.embedding, s.models)
    one = _folder(tmp_path / "src", ["a1.md", "a2.md", "a3.md"])
    two = _folder(tmp_path / "src-more", ["b1.md", "b2.md", "b3.md"])  # its path starts like the first's
    _sync(one, s, es, emb)
    _sync(two, s, es, emb)
    (one / "a1.md").unlink()
    done = _sync(one, s, es, emb, force=True)
    assert done.documents_deleted == 1
    assert sorted(_visible(es, s)) == ["a2.md", "a3.md", "b1.md", "b2.md", "b3.md"]
    again = _sync(two, s, es, emb)
    assert again.documents_deleted == 0 and again.changed_nothing


def test_a_jsonl_re_export_with_records_dropped(es: EngineClient, settings: Settings, tiny_bi_encoder: Path,
                                                tmp_path: Path) -> None:
    s = _tiny(settings, tiny_bi_encoder)
    emb = Embedder(s.embedding, s.models)
    export = tmp_path / "export.jsonl"
    records = [{"id": f"r{i}", "title": f"Record {i}", "text": f"Record number {i} of the nightly export."}
               for i in range(10)]
    export.write_text("\n".join(json.dumps(r) for r in records) + "\n", encoding="utf-8")
    assert _sync(export, s, es, emb).documents_indexed == 10
    export.write_text("\n".join(json.dumps(r) for r in records if r["id"] not in {"r3", "r7"}) + "\n",
                      encoding="utf-8")
    again = _sync(export, s, es, emb)
    assert (again.documents_deleted, again.documents_skipped, again.documents_indexed) == (2, 8, 0)
    assert sorted(_visible(es, s)) == sorted(f"r{i}" for i in range(10) if i not in {3, 7})


def _cli_env(monkeypatch: pytest.MonkeyPatch, s: Settings, tmp_path: Path) -> None:
    monkeypatch.setenv("HSP_INDEX__PREFIX", s.index.prefix)
    monkeypatch.setenv("HSP_ES_URL", s.es.url)
    monkeypatch.setenv("HSP_INGEST__DEAD_LETTER_DIR", str(tmp_path / "dl"))
    monkeypatch.setenv("HSP_EMBEDDING__MODEL", s.embedding.model)
    monkeypatch.setenv("HSP_EMBEDDING__DIMS", str(s.embedding.dims))


def _synced_by_cli(settings: Settings, tiny_dir: Path, tmp_path: Path,
                   monkeypatch: pytest.MonkeyPatch) -> tuple[Settings, Path]:
    """Five notes in a folder, synced once by ``hsp ingest --sync``: the settings and the folder."""
    s = _tiny(settings, tiny_dir)
    _cli_env(monkeypatch, s, tmp_path)
    src = _folder(tmp_path / "notes", [f"n{i}.md" for i in range(5)])
    assert main(["ingest", str(src), "--sync", "--no-progress"]) == 0
    return s, src


def test_the_dry_run_says_what_would_change_and_writes_nothing(
        es: EngineClient, settings: Settings, tiny_bi_encoder: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    s, src = _synced_by_cli(settings, tiny_bi_encoder, tmp_path, monkeypatch)
    assert "0 deleted" in capsys.readouterr().out
    before = _visible(es, s)
    (src / "n0.md").unlink()
    (src / "n1.md").write_text("The note n1 changed.\n", encoding="utf-8")
    _folder(src, ["n9.md"])
    assert main(["ingest", str(src), "--sync", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "1 to add, 1 to replace, 1 to delete, 3 unchanged" in out
    assert "delete  n0.md" in out and "add     n9.md" in out and "replace n1.md" in out
    assert _visible(es, s) == before


def test_the_delete_share_guard_refuses_then_force_deletes(
        es: EngineClient, settings: Settings, tiny_bi_encoder: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    s, src = _synced_by_cli(settings, tiny_bi_encoder, tmp_path, monkeypatch)
    for i in range(3):
        (src / f"n{i}.md").unlink()
    _folder(src, ["new.md"])
    capsys.readouterr()
    assert main(["ingest", str(src), "--sync", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "would delete 3 of its 5 documents" in err and "nothing was written" in err
    assert sorted(_visible(es, s)) == [f"n{i}.md" for i in range(5)]
    with pytest.raises(ConfigError):
        run_ingest(src, s, es=es, sync=True)
    assert main(["ingest", str(src), "--sync", "--force", "--no-progress"]) == 0
    assert "3 deleted" in capsys.readouterr().out
    assert sorted(_visible(es, s)) == ["n3.md", "n4.md", "new.md"]


def test_a_source_not_read_whole_deletes_nothing(es: EngineClient, settings: Settings, tiny_bi_encoder: Path,
                                                 tmp_path: Path) -> None:
    s = _tiny(settings, tiny_bi_encoder)
    emb = Embedder(s.embedding, s.models)
    src = _folder(tmp_path / "notes", [f"n{i}.md" for i in range(6)])
    _sync(src, s, es, emb)
    (src / "n0.md").unlink()
    (src / "broken.txt").write_bytes(b"not \x00 text")
    _folder(src, ["n7.md"])
    partial = _sync(src, s, es, emb)
    assert partial.documents_deleted == 0 and partial.documents_indexed == 1
    assert partial.sync_withheld is not None and "not read whole" in partial.sync_withheld
    assert "n0.md" in _visible(es, s) and "n7.md" in _visible(es, s)

    export = tmp_path / "export.jsonl"
    lines = [json.dumps({"id": f"r{i}", "text": f"Record {i} of the export."}) for i in range(6)]
    export.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _sync(export, s, es, emb)
    export.write_text("\n".join(lines[1:5]) + "\n" + lines[5][:12] + "\n", encoding="utf-8")  # r0 gone, r5 cut
    cut = _sync(export, s, es, emb)
    assert cut.documents_deleted == 0 and cut.sync_withheld is not None
    assert {"r0", "r5"} <= set(_visible(es, s))


# A sync killed while it deleted: its lease held, both documents hidden, all of the second's chunks gone and
# every other chunk of the first.
_KILLED_SYNC = """
import os, signal, sys
from hybridsearch.engine import EngineClient, request
from hybridsearch.ingest.commit import stored_chunks
from hybridsearch.ingest.lease import Lease
from hybridsearch.ingest.writer import write_actions
from hybridsearch.settings import load_settings
s = load_settings()
es = EngineClient(s.es)
index = s.index.versioned(1)
ids = sys.argv[1:]
lease = Lease(es, s.index, "killed-sync")
lease.acquire()
lease.hide(ids)
es.send(request.refresh(index))
found = sorted((i, d) for d, s in stored_chunks(es, index, dict.fromkeys(ids, ""), None).items() for i in s)
gone = [(i, d) for i, d in found if d == ids[1]] + [(i, d) for i, d in found if d == ids[0]][::2]
write_actions(es, [{"_op_type": "delete", "_index": index, "_id": i, "_doc_id": d} for i, d in gone], s.ingest)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_sync_killed_while_deleting_is_finished_by_the_next(es: EngineClient, settings: Settings,
                                                              tiny_bi_encoder: Path, tmp_path: Path) -> None:
    s = _tiny(settings, tiny_bi_encoder, sync_max_delete=0.5)
    emb = Embedder(s.embedding, s.models)
    src = _folder(tmp_path / "notes", [f"n{i}.md" for i in range(4)])
    paragraph = " ".join(f"word{i}" for i in range(120))
    (src / "big.md").write_text("\n\n".join(f"Part {p}: {paragraph}" for p in range(6)), encoding="utf-8")
    _sync(src, s, es, emb)
    chunks = int(es.send(request.count(s.index.alias, {"term": {"doc_id": "big.md"}}))["count"])
    assert chunks >= 4
    (src / "big.md").unlink()
    (src / "n0.md").unlink()
    env = {**os.environ, "HSP_INDEX__PREFIX": s.index.prefix, "HSP_ES_URL": s.es.url, "HF_HUB_OFFLINE": "1",
           "HSP_INGEST__DEAD_LETTER_DIR": str(tmp_path / "dl")}
    child = subprocess.run([sys.executable, "-c", _KILLED_SYNC, "big.md", "n0.md"], env=env, capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    es.send(request.refresh(s.index.alias))
    left = int(es.send(request.count(s.index.alias, {"term": {"doc_id": "big.md"}}))["count"])
    assert 0 < left < chunks
    assert sorted(_visible(es, s)) == ["n1.md", "n2.md", "n3.md"]  # hidden, never seen in part

    done = _sync(src, s, es, emb)
    assert done.took_over == ["killed-sync"] and done.documents_deleted == 1 and done.still_hidden == 0
    es.send(request.refresh(s.index.alias))
    assert es.send(request.count(s.index.alias, {"terms": {"doc_id": ["big.md", "n0.md"]}}))["count"] == 0
    assert sorted(_visible(es, s)) == ["n1.md", "n2.md", "n3.md"]
    state = es.send(request.get_doc(s.index.ingest_state, STATE_ID))["_source"]
    assert not state.get("hidden")
