"""Fakes at the I/O seam of the query layer, answering with recorded ``_msearch`` answers (tests/unit/recordings).

:class:`FakeES` stands for :class:`hybridsearch.engine.EngineClient` (and :class:`FakeAsyncES` for its asyncio twin):
its ``msearch`` gives each list of a search its item of a recording (which holds BM25's, kNN's and, where recorded,
the passage list's; unrecorded, the passage list finds nothing) and answers ``why``'s probes (its counts and one-hit
searches of one document) from its attributes; the alias and mapping calls answer for one index built from the
settings' own template. :class:`MovingES` is a cluster whose alias a migration swaps.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast
from urllib.parse import unquote

import numpy as np

from hybridsearch.engine import ELASTICSEARCH, Dialect, EngineInfo, Request
from hybridsearch.index.spec import load_template
from hybridsearch.query.results import SearchResult, WhyReport
from hybridsearch.settings import Settings, load_settings

RECORDINGS = Path(__file__).parent / "unit" / "recordings"
INDEX = "rec-chunks-v1"


def recording(name: str) -> dict[str, Any]:
    body: dict[str, Any] = json.loads((RECORDINGS / f"msearch_{name}.json").read_text())
    return body


class FakeIndices:
    def __init__(self, settings: Settings, dialect: Dialect) -> None:
        self.alias = settings.index.alias
        self.mappings = load_template("chunks", settings, dialect)["template"]["mappings"]
        self.state_present = True

    def get_alias(self, name: str) -> dict[str, Any]:
        return {INDEX: {"aliases": {self.alias: {"is_write_index": True}}}}

    def get_mapping(self, index: str, ignore_unavailable: bool | None = None) -> dict[str, Any]:
        """The chunk index's mapping and (``ignore_unavailable``: when asked for and present) the state index's."""
        names = index.split(",")
        found: dict[str, Any] = {INDEX: {"mappings": self.mappings}}
        found.update({n: {"mappings": {}} for n in names[1:] if self.state_present})
        return found

    def put_mapping(self, index: str, meta: dict[str, Any]) -> dict[str, Any]:
        """Replace the chunk index's ``_meta`` (what ``record_meta`` sends)."""
        self.mappings = {**self.mappings, "_meta": meta}
        return {"acknowledged": True}


class FakeES:
    """The I/O seam: what the sync client calls on :class:`hybridsearch.engine.EngineClient`."""

    def __init__(self, settings: Settings, answer: dict[str, Any] | Exception,
                 dialect: Dialect = ELASTICSEARCH) -> None:
        self.dialect = dialect
        self.engine = EngineInfo(dialect.kind, "9.3.2" if dialect.kind == "elasticsearch" else "3.5.0")
        self.chunks = 6  # what _count answers: the chunks of the recorded index, on one shard
        self.indices = FakeIndices(settings, dialect)
        self.answer = answer
        self.sent: list[list[dict[str, Any]]] = []
        self.doc_chunks = 2  # what why's counts of one document's chunks answer
        self.as_high = 40  # what why's count of the chunks that score as high as the document answers
        self.probe_score: float | None = 0.5  # the score of why's one-hit probe searches (None: no hit)

    def msearch(self, searches: list[dict[str, Any]]) -> dict[str, Any]:
        self.sent.append(searches)
        if isinstance(self.answer, Exception):
            raise self.answer
        recorded = dict(zip(RECORDED, self.answer["responses"], strict=False))
        return {"responses": [self._probed(body) if is_probe(body) else recorded.get(list_of(body), NOTHING)
                              for body in searches[1::2]]}

    def _probed(self, body: dict[str, Any]) -> dict[str, Any]:
        if body.get("track_total_hits") is True:  # a count
            count = self.as_high if "min_score" in body else self.doc_chunks
            return {"hits": {"total": {"value": count, "relation": "eq"}, "hits": []}, "status": 200}
        hits = [] if self.probe_score is None else [{"_index": INDEX, "_id": "probed", "_score": self.probe_score}]
        return {"hits": {"hits": hits}, "status": 200}

    def count(self, index: str) -> dict[str, Any]:
        return {"count": self.chunks, "_shards": {"total": 1, "successful": 1, "skipped": 0, "failed": 0}}

    def send(self, request: Request) -> Any:
        """The answer to each request the search path sends, by its path."""
        path = unquote(request.path)
        if path == "/_msearch":
            return self.msearch(cast(list[dict[str, Any]], request.body))
        if path.endswith("/_count"):
            return self.count(path[1:].removesuffix("/_count"))
        if path.startswith("/_alias/"):
            return self.indices.get_alias(path.removeprefix("/_alias/"))
        if path.endswith("/_mapping") and request.method == "GET":
            return self.indices.get_mapping(path[1:].removesuffix("/_mapping"),
                                            request.params.get("ignore_unavailable") == "true")
        if path.endswith("/_mapping") and request.method == "PUT":
            return self.indices.put_mapping(path[1:].removesuffix("/_mapping"), dict(request.body or {})["_meta"])
        raise AssertionError(f"the search path sent {request}")

    def close(self) -> None:
        pass


#: the lists a recording answers, in its order; an answer of the passage list that finds nothing
RECORDED = ("bm25", "knn", "passages")
NOTHING: dict[str, Any] = {"took": 1, "timed_out": False, "hits": {"hits": []}, "status": 200}


def is_probe(body: dict[str, Any]) -> bool:
    """Whether a search body is one of why's probes (a count, or a one-hit search without ``_source``)."""
    return body.get("track_total_hits") is True or body.get("_source") is False


def is_knn(body: dict[str, Any]) -> bool:
    """Whether a search body is the kNN list's (Elasticsearch's top-level ``knn``, OpenSearch's ``knn`` query)."""
    return "knn" in body or "knn" in body.get("query", {})


def list_of(body: dict[str, Any]) -> str:
    """Which list a search body is: ``knn``, ``passages`` (BM25 on the chunks' text) or ``bm25``."""
    if is_knn(body):
        return "knn"
    return "passages" if "text" in body["query"]["bool"]["must"][0].get("match", {}) else "bm25"


def one_msearch(sent: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The lines of one search's requests as one ``_msearch`` would send them: BM25's, then kNN's."""
    return [line for request in sorted(sent, key=lambda r: is_knn(r[1])) for line in request]


class FakeAsyncES:
    """The same seam for :class:`hybridsearch.engine.AsyncEngineClient`."""

    def __init__(self, sync: FakeES) -> None:
        self.sync = sync
        self.dialect = sync.dialect

    async def detect(self) -> EngineInfo:
        return self.sync.engine

    @property
    def engine(self) -> EngineInfo:
        return self.sync.engine

    async def send(self, request: Request) -> Any:
        return self.sync.send(request)

    async def close(self) -> None:
        pass


class FixedVectors:
    """The embedding model's place: one fixed unit vector per query."""

    def encode_query(self, text: str) -> np.ndarray:
        vec = np.ones(384, dtype=np.float32)
        return vec / np.linalg.norm(vec)


def settings() -> Settings:
    return load_settings(es_url="http://127.0.0.1:1", index={"prefix": "rec"}, query={"log_queries": False},
                         reranker={"timeout": 0.3})


def same(a: SearchResult | WhyReport, b: SearchResult | WhyReport) -> bool:
    """Whether two results (or reports) say the same, timings aside."""
    return a.model_dump(exclude={"timings"}) == b.model_dump(exclude={"timings"})


class MovingIndices(FakeIndices):
    """An alias that a migration swaps from ``rec-chunks-v1`` to ``rec-chunks-v2`` (whose ``_meta`` names
    ``model``) once ``move()`` is called; ``checked`` records every mapping read."""

    def __init__(self, settings: Settings, model: str) -> None:
        super().__init__(settings, ELASTICSEARCH)
        self.current, self.checked = INDEX, []
        self.moved_mappings = json.loads(json.dumps(self.mappings))
        self.moved_mappings["_meta"]["embedding_model"] = model

    def get_alias(self, name: str) -> dict[str, Any]:
        return {self.current: {"aliases": {self.alias: {"is_write_index": True}}}}

    def get_mapping(self, index: str, ignore_unavailable: bool | None = None) -> dict[str, Any]:
        index = index.split(",")[0]  # the chunk index (the state index after it is absent here)
        self.checked.append(index)
        return {index: {"mappings": self.mappings if index == INDEX else self.moved_mappings}}


class MovingES(FakeES):
    """Answers as the index the alias points at now: every hit's ``_index`` is the current one."""

    def __init__(self, settings: Settings, model: str) -> None:
        super().__init__(settings, recording("hybrid"))
        self.indices: MovingIndices = MovingIndices(settings, model)

    def msearch(self, searches: list[dict[str, Any]]) -> dict[str, Any]:
        answer = json.loads(json.dumps(super().msearch(searches)))
        for r in answer["responses"]:
            for hit in r.get("hits", {}).get("hits", []):
                hit["_index"] = self.indices.current
        return answer
