"""BEIR-format collections and the guard of the test split (:func:`check_split`, :func:`check_disjoint`). Every
problem with the files raises ConfigError naming the file and line."""

from __future__ import annotations

import csv
import gzip
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import IO, Any

from hybridsearch.errors import ConfigError
from hybridsearch.jsonl import BadLine, parse_lines

Qrels = dict[str, dict[str, int]]
SHOWN_IDS = 5  # overlapping query ids named in the error


@dataclass(frozen=True)
class Collection:
    """One split of a BEIR collection: queries judged in ``split`` and their relevance judgements."""

    name: str
    root: Path
    split: str
    corpus_path: Path
    qrels_path: Path
    queries: dict[str, str]
    qrels: Qrels
    skipped_queries: int = 0  # judged queries missing from queries.jsonl

    def __len__(self) -> int:
        return len(self.queries)

    def limit(self, n: int | None) -> Collection:
        """The first ``n`` queries (in sorted id order) with their qrels; all when ``n`` is None."""
        if n is None or n >= len(self.queries):
            return self
        keep = sorted(self.queries, key=lambda q: (int(q), "") if q.isdigit() else (1 << 62, q))[:n]  # "2" before "10"
        return replace(self, queries={q: self.queries[q] for q in keep}, qrels={q: self.qrels[q] for q in keep})


def _open_text(path: Path) -> IO[str]:
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return path.open("r", encoding="utf-8")


def _found(root: Path, stem: str) -> Path | None:
    return next((p for p in (root / stem, root / f"{stem}.gz") if p.is_file()), None)


def _find(root: Path, stem: str) -> Path:
    if (path := _found(root, stem)) is None:
        raise ConfigError(f"{root} is not a BEIR collection: no {stem} or {stem}.gz")
    return path


def collection_name(root: Path) -> str:
    """Index-safe name of a collection folder, e.g. ``scifact`` (lowercase, ``[a-z0-9_.-]``)."""
    name = re.sub(r"[^a-z0-9_.-]+", "-", root.resolve().name.lower()).strip("-._")
    return name or "collection"


def read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, record)`` for each non-blank line. Raises ConfigError on invalid JSON."""
    with _open_text(path) as fh:
        for item in parse_lines(fh):
            if isinstance(item, BadLine):
                raise ConfigError(f"{path}:{item.lineno}: invalid JSON ({item.reason})")
            lineno, record = item
            if not isinstance(record, dict):
                raise ConfigError(f"{path}:{lineno}: expected a JSON object")
            yield lineno, record


def read_queries(path: Path) -> dict[str, str]:
    """``{query id: text}`` from ``queries.jsonl``. Raises ConfigError on a record without id or text."""
    queries: dict[str, str] = {}
    for lineno, rec in read_jsonl(path):
        qid, text = rec.get("_id"), rec.get("text")
        if qid is None or not isinstance(text, str):
            raise ConfigError(f"{path}:{lineno}: a query needs '_id' and 'text'")
        queries[str(qid)] = text
    return queries


def read_qrels(path: Path) -> Qrels:
    """``{query id: {doc id: grade}}`` from a TSV with a ``query-id corpus-id score`` header line."""
    qrels: Qrels = {}
    with _open_text(path) as fh:
        rows = csv.reader(fh, delimiter="\t")
        header = next(rows, None)
        if header is None:
            raise ConfigError(f"{path}: empty qrels file")
        if len(header) < 3 or header[2].strip().lstrip("-").isdigit():
            raise ConfigError(f"{path}: expected a header line 'query-id<TAB>corpus-id<TAB>score', got {header!r}")
        for lineno, row in enumerate(rows, 2):
            if not row or not "".join(row).strip():
                continue
            if len(row) < 3:
                raise ConfigError(f"{path}:{lineno}: expected 3 tab-separated columns, got {row!r}")
            try:
                grade = int(float(row[2]))
            except ValueError:
                raise ConfigError(f"{path}:{lineno}: score {row[2]!r} is not a number") from None
            qrels.setdefault(row[0].strip(), {})[row[1].strip()] = grade
    return qrels


def load_collection(path: str | Path, split: str = "test") -> Collection:
    """Split ``split`` of the BEIR collection in folder ``path``: only queries judged in it. Raises ConfigError."""
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ConfigError(f"collection folder {root} does not exist")
    corpus = _find(root, "corpus.jsonl")
    queries_path = _find(root, "queries.jsonl")
    qrels_path = _found(root / "qrels", f"{split}.tsv")
    if qrels_path is None:
        found = {p.name.removesuffix(".gz").removesuffix(".tsv") for p in (root / "qrels").glob("*.tsv*")}
        raise ConfigError(f"{root} has no qrels for split {split!r} (available: {', '.join(sorted(found)) or 'none'})")
    all_queries = read_queries(queries_path)
    qrels = read_qrels(qrels_path)
    judged = {q: all_queries[q] for q in qrels if q in all_queries}
    if not judged:
        raise ConfigError(f"no query of split {split!r} in {qrels_path} appears in {queries_path}")
    return Collection(
        name=collection_name(root), root=root, split=split, corpus_path=corpus, qrels_path=qrels_path,
        queries=judged, qrels={q: qrels[q] for q in judged}, skipped_queries=len(qrels) - len(judged),
    )


def iter_corpus(path: Path, limit: int | None = None) -> Iterator[dict[str, str]]:
    """``{"_id", "title", "text"}`` records of a BEIR ``corpus.jsonl[.gz]`` (first ``limit`` only)."""
    for n, (lineno, rec) in enumerate(read_jsonl(path)):
        if limit is not None and n >= limit:
            return
        if rec.get("_id") is None:
            raise ConfigError(f"{path}:{lineno}: a corpus record needs '_id'")
        yield {"_id": str(rec["_id"]), "title": str(rec.get("title") or ""), "text": str(rec.get("text") or "")}


def check_split(split: str, allow_test: bool = False, purpose: str = "train") -> None:
    """Raise ConfigError for the ``test`` split unless ``allow_test``; ``purpose`` is the verb shown."""
    if split == "test" and not allow_test:
        raise ConfigError(
            f"refusing to {purpose} on the {split!r} split: its queries are for reporting. Use 'train' "
            "(or 'dev'); pass --allow-test only for a collection you will never evaluate on."
        )


def check_disjoint(dataset: Path, qids: Iterable[str], purpose: str = "training") -> list[str]:
    """The ``test`` qrels file of ``dataset`` checked (none: ``[]``); raises ConfigError naming the ``qids`` judged
    in it."""
    path = _found(Path(dataset).expanduser().resolve() / "qrels", "test.tsv")
    if path is None:
        return []
    if shared := set(qids) & set(read_qrels(path)):
        some = ", ".join(sorted(shared)[:SHOWN_IDS]) + (" …" if len(shared) > SHOWN_IDS else "")
        raise ConfigError(f"{len(shared)} {purpose} queries are also judged in {path} ({some}): {purpose} and "
                          "test queries must be disjoint, or every test figure is contaminated")
    return [str(path)]
