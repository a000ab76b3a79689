"""What differs between the engines, pure: the JSON we send and the version rules (:class:`EngineInfo`). The
settings speak Elasticsearch's vocabulary: ``vector_field`` renders it, ``vector_summary`` reads a mapping back."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from hybridsearch.errors import ConfigError

EngineKind = Literal["elasticsearch", "opensearch"]


@dataclass(frozen=True)
class VectorSummary:
    """A vector field's mapping in the settings' vocabulary; ``options`` as ``{"type": "int8_hnsw", "m": 16, ...}``."""

    is_vector: bool
    dims: int | None = None
    similarity: str | None = None
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def unsafe_options(self) -> str | None:
        """Why these OpenSearch vector options would take a node from the plugin zip down, or None."""
        if self.options.get("mode") == "on_disk":
            return "its vectors use on_disk mode, which needs the faiss engine; rebuild on the lucene engine"
        engine = self.options.get("engine")
        if engine not in (None, LUCENE):
            return (f"its vectors use the {engine} k-NN engine, which needs native libraries the OpenSearch k-NN "
                    "plugin zip does not ship (a bulk into it crashes such a node); rebuild on the lucene engine")
        return None


class ElasticsearchDialect:
    """Elasticsearch 8.12+ and 9.x: ``dense_vector`` with ``index_options``, top-level ``knn``."""

    kind: EngineKind = "elasticsearch"
    metadata_type = "flattened"
    index_settings: ClassVar[Mapping[str, Any]] = {}  # what a chunk index needs beyond shards and replicas

    def vector_field(self, dims: int, similarity: str, index_options: Mapping[str, Any]) -> dict[str, Any]:
        return {"type": "dense_vector", "dims": dims, "index": True, "similarity": similarity,
                "index_options": dict(index_options)}

    def vector_summary(self, prop: Mapping[str, Any]) -> VectorSummary:
        if prop.get("type") != "dense_vector":
            return VectorSummary(is_vector=False)
        return VectorSummary(True, prop.get("dims"), prop.get("similarity", "cosine"),
                             dict(prop.get("index_options", {})))

    def knn_search(self, field: str, vector: Sequence[float], k: int, num_candidates: int,
                   filters: list[dict[str, Any]], oversample: float | None = None) -> dict[str, Any]:
        """The body keys of a kNN search for the ``k`` nearest chunks passing every filter, ``oversample`` rescored."""
        knn: dict[str, Any] = {"field": field, "query_vector": [float(x) for x in vector], "k": k,
                               "num_candidates": num_candidates, "filter": filters}
        if oversample is not None:
            knn["rescore_vector"] = {"oversample": oversample}
        return {"knn": knn}


_SPACE = {"cosine": "cosinesimil", "dot_product": "innerproduct"}
_SIMILARITY = {v: k for k, v in _SPACE.items()}
#: index_options the lucene engine can serve, and the encoder each needs (None: plain float vectors)
OPENSEARCH_OPTIONS = {"hnsw": None, "int8_hnsw": "sq"}
LUCENE = "lucene"  # the only k-NN engine the plugin zip can run (it ships no native libraries)


class OpenSearchDialect:
    """OpenSearch 2.16+/3.x with the k-NN plugin: ``knn_vector`` on the ``lucene`` engine, the ``knn`` clause."""

    kind: EngineKind = "opensearch"
    metadata_type = "flat_object"
    index_settings: ClassVar[Mapping[str, Any]] = {"knn": True}

    def vector_field(self, dims: int, similarity: str, index_options: Mapping[str, Any]) -> dict[str, Any]:
        kind = str(index_options.get("type"))
        if kind not in OPENSEARCH_OPTIONS:
            raise ConfigError(
                f"index_options {kind} has no equivalent on OpenSearch's lucene k-NN engine",
                fix=f"Set HSP_INDEX__INDEX_OPTIONS to one of {', '.join(OPENSEARCH_OPTIONS)} for OpenSearch")
        params: dict[str, Any] = {"m": index_options.get("m", 16),
                                  "ef_construction": index_options.get("ef_construction", 100)}
        if (encoder := OPENSEARCH_OPTIONS[kind]) is not None:
            params["encoder"] = {"name": encoder}
        return {"type": "knn_vector", "dimension": dims,
                "method": {"name": "hnsw", "engine": LUCENE, "space_type": _SPACE[similarity], "parameters": params}}

    def vector_summary(self, prop: Mapping[str, Any]) -> VectorSummary:
        if prop.get("type") != "knn_vector":
            return VectorSummary(is_vector=False)
        method = prop.get("method") or {}
        params = dict(method.get("parameters") or {})
        encoder = (params.pop("encoder", None) or {}).get("name")
        kind = next((k for k, enc in OPENSEARCH_OPTIONS.items() if enc == encoder), f"hnsw+{encoder}")
        options = {"type": kind if method.get("name", "hnsw") == "hnsw" else method.get("name"), **params,
                   "engine": method.get("engine", "faiss")}  # the plugin's default
        if prop.get("mode"):
            options["mode"] = prop["mode"]
        space = method.get("space_type", "l2")
        return VectorSummary(True, prop.get("dimension"), _SIMILARITY.get(space, space), options)

    def knn_search(self, field: str, vector: Sequence[float], k: int, num_candidates: int,
                   filters: list[dict[str, Any]], oversample: float | None = None) -> dict[str, Any]:
        if oversample is not None:
            raise ConfigError("the k-NN plugin's lucene engine cannot rescore quantized vectors",
                              fix="Unset HSP_QUERY__RESCORE_OVERSAMPLE on OpenSearch")
        clause: dict[str, Any] = {"vector": [float(x) for x in vector], "k": k,
                                  "method_parameters": {"ef_search": num_candidates}}
        if filters:
            clause["filter"] = {"bool": {"filter": filters}}
        return {"query": {"knn": {field: clause}}}


Dialect = ElasticsearchDialect | OpenSearchDialect
ELASTICSEARCH: Dialect = ElasticsearchDialect()
OPENSEARCH: Dialect = OpenSearchDialect()


@dataclass(frozen=True)
class EngineInfo:
    """Which engine answers: kind and version (None when ``HSP_ES__ENGINE`` named it and nothing was asked)."""

    kind: EngineKind
    version: str | None = None

    @property
    def dialect(self) -> Dialect:
        return OPENSEARCH if self.kind == "opensearch" else ELASTICSEARCH

    @property
    def version_tuple(self) -> tuple[int, ...] | None:
        return None if self.version is None else tuple(int(p) for p in re.findall(r"\d+", self.version)[:3])

    def at_least(self, major: int, minor: int) -> bool:
        """Whether the engine is ``major.minor`` or later; an unknown version counts as the newest."""
        have = self.version_tuple
        return have is None or have[:2] >= (major, minor)

    @property
    def name(self) -> str:
        label = "OpenSearch" if self.kind == "opensearch" else "Elasticsearch"
        return f"{label} {self.version}" if self.version else label

    @property
    def source_with_vectors(self) -> Any:
        """``_source`` that returns the vector too: Elasticsearch 9.1+ leaves vectors out unless asked."""
        return {"exclude_vectors": False} if self.kind == "elasticsearch" and self.at_least(9, 1) else True

    @property
    def has_privileges_api(self) -> bool:
        """Whether the engine answers ``_has_privileges`` (OpenSearch's security plugin has no such API)."""
        return self.kind == "elasticsearch"

    @property
    def rescores_vectors(self) -> bool:
        """Whether kNN can rescore quantized vectors on their floats (``rescore_vector``: Elasticsearch 8.18+)."""
        return self.kind == "elasticsearch" and self.at_least(8, 18)

    @property
    def chunk_index_settings(self) -> dict[str, Any]:
        """Dynamic settings of every chunk index: ``fanout`` on Elasticsearch 9.1+ (docs/operations.md)."""
        fanout = self.kind == "elasticsearch" and self.at_least(9, 1)
        return {"index.dense_vector.hnsw_filter_heuristic": "fanout"} if fanout else {}

    @property
    def chunk_index_creation_settings(self) -> dict[str, Any]:
        """Static settings of a new chunk index: OpenSearch 3.x's k-NN derived source off (docs/operations.md)."""
        return {"index.knn.derived_source.enabled": False} if self.kind == "opensearch" and self.at_least(3, 0) else {}

    def support_problem(self) -> str | None:
        """Why this engine version cannot serve the platform, or None."""
        need = (8, 12) if self.kind == "elasticsearch" else (2, 16)  # kNN pre-filters, int8 HNSW, lucene sq
        if self.at_least(*need):
            return None
        return (f"{self.name} is not supported: hybridsearch needs {self.name.split()[0]} "
                f"{need[0]}.{need[1]} or newer (kNN with pre-filters, int8 HNSW vectors)")
