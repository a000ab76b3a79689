"""The stdlib demo corpus: real, large, deterministic, and imported without side effects."""

from __future__ import annotations

import collections
import json
import subprocess
import sys

import pytest

from hybridsearch.demo import SKIP_MODULES, stdlib_documents
from hybridsearch.ingest.sources import Document


@pytest.fixture(scope="module")
def docs() -> list[Document]:
    return list(stdlib_documents())


def test_thousands_of_documents_of_every_kind(docs: list[Document]) -> None:
    kinds = collections.Counter(d.metadata["kind"] for d in docs)
    assert len(docs) >= 3000
    assert set(kinds) == {"topic", "module", "class", "function", "method"}
    assert kinds["topic"] >= 50 and kinds["module"] >= 150
    assert len({d.doc_id for d in docs}) == len(docs)
    assert all(d.text.strip() and d.content_hash and d.doc_id.startswith("py:") for d in docs)


def test_ids_titles_and_metadata(docs: list[Document]) -> None:
    by_id = {d.doc_id: d for d in docs}
    loads = by_id["py:json.loads"]
    assert loads.title is not None and loads.title.startswith("json.loads(")
    assert loads.metadata["kind"] == "function" and loads.metadata["module"] == "json"
    assert "JSON" in loads.text
    assert by_id["py:argparse"].metadata["kind"] == "module"
    assert by_id["py:builtins.list.sort"].metadata == {**by_id["py:builtins.list.sort"].metadata, "kind": "method"}
    assert by_id["py:topic:with"].metadata["kind"] == "topic"
    assert by_id["py:subprocess.run"].metadata["kind"] == "function"
    assert "py:array.ArrayType" not in by_id  # aliases are documented once, under their own name
    assert "py:os.path.join" in by_id or "py:posixpath.join" in by_id


def test_deterministic_and_limit_is_a_prefix(docs: list[Document], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_DEMO_PROBE", "changes os.environ, which some signatures default to")
    again = list(stdlib_documents())
    assert [(d.doc_id, d.content_hash) for d in again] == [(d.doc_id, d.content_hash) for d in docs]
    first = list(stdlib_documents(limit=500))
    assert [d.doc_id for d in first] == [d.doc_id for d in docs[:500]]
    assert list(stdlib_documents(limit=0)) == docs  # 0 means all
    kinds = [d.metadata["kind"] for d in docs]
    assert kinds.index("module") > kinds.index("topic")  # the order that makes a limit useful
    assert kinds[-1] == "method"


def test_no_side_effects_and_skipped_modules_stay_unimported() -> None:
    side_effects = sorted({"antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo"} & SKIP_MODULES)
    assert len(side_effects) == 6
    code = ("import sys, json; from hybridsearch.demo import stdlib_documents; n = len(list(stdlib_documents())); "
            f"print(json.dumps({{'n': n, 'imported': sorted(m for m in {side_effects!r} if m in sys.modules)}}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    report = json.loads(out.stdout)  # nothing else was printed: the only stdout line is ours
    assert report["n"] >= 3000 and report["imported"] == []
