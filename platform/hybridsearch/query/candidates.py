"""How widely a kNN search looks: ``num_candidates`` from the size of the index's shards, and the rescoring of
quantized vectors on their float originals where the engine has it. Pure.

Measured with ``ops/bench/bench_scale.py`` (synthetic clustered 384-dim vectors, ``int8_hnsw``, 3 shards, Elasticsearch
9.3.2; recall@10 against exact search): at 1M chunks (333k a shard) recall@10 was 0.8775 at 200 candidates and
no better at 400, 800 or 1,600 (0.8705): what is lost is the order of int8 vectors, not the graph's reach.
Rescoring the gathered candidates on the float vectors Elasticsearch keeps (``rescore_vector``, 8.18+) brings it to
0.9985. So quantized vectors are rescored by default (``oversample`` 1: the ``k`` candidates a search gathers
anyway, which for our ``k`` of 200 covers the top 10 many times over), and ``num_candidates`` stays at the measured
200 up to :data:`BASE_SHARD_CHUNKS` chunks a shard, growing beyond (a precaution: larger shards were not measured).
``HSP_QUERY__NUM_CANDIDATES`` and ``HSP_QUERY__RESCORE_OVERSAMPLE`` override the choice, which is reported on
every result that has a kNN list (``SearchResult.knn_width``). OpenSearch's lucene engine cannot rescore: its
``sq`` vectors keep the quantized order (use ``hnsw`` there where recall matters more than memory).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hybridsearch.settings import QuerySettings

#: candidates enough for a shard of up to :data:`BASE_SHARD_CHUNKS` chunks (more gained nothing at 333k, above)
BASE_CANDIDATES = 200
BASE_SHARD_CHUNKS = 350_000
#: how candidates grow with a shard beyond that: ``(chunks / BASE_SHARD_CHUNKS) ** GROWTH`` times as many
GROWTH = 0.5
#: the most candidates an engine takes (Elasticsearch and OpenSearch refuse more)
MAX_CANDIDATES = 10_000
#: rescoring of quantized vectors when the engine has it: ``k`` × this many candidates rescored
DEFAULT_OVERSAMPLE = 1.0
#: vector index options whose stored vectors are quantized (Elasticsearch names; OpenSearch's ``sq`` encoder is
#: ``int8_hnsw`` in our settings)
QUANTIZED_PREFIXES = ("int8_", "int4_", "bbq_")


@dataclass(frozen=True)
class KnnWidth:
    """How widely one kNN search looks: ``num_candidates`` per shard, ``oversample`` (None: no rescoring) and
    why, in words for people (``hsp search --explain``)."""

    num_candidates: int
    oversample: float | None
    reason: str


def is_quantized(index_options_type: str | None) -> bool:
    """Whether vectors indexed with this ``index_options.type`` are searched in a quantized form."""
    return bool(index_options_type) and str(index_options_type).startswith(QUANTIZED_PREFIXES)


def auto_candidates(k: int, shard_chunks: int | None) -> int:
    """``num_candidates`` for a search of ``k`` neighbours on shards of at most ``shard_chunks`` chunks (None:
    not known yet): :data:`BASE_CANDIDATES`, grown past :data:`BASE_SHARD_CHUNKS` chunks a shard, rounded up to
    a multiple of 50, at least ``k`` and at most :data:`MAX_CANDIDATES`."""
    wanted = float(BASE_CANDIDATES)
    if shard_chunks is not None and shard_chunks > BASE_SHARD_CHUNKS:
        wanted *= (shard_chunks / BASE_SHARD_CHUNKS) ** GROWTH
    return min(MAX_CANDIDATES, max(k, 50 * math.ceil(wanted / 50)))


def knn_width(q: QuerySettings, k: int, shard_chunks: int | None, *, quantized: bool, can_rescore: bool) -> KnnWidth:
    """The width of a kNN search for ``k`` neighbours on an index whose largest shard holds ``shard_chunks`` chunks
    (None: unknown), whose vectors are ``quantized`` or not, on an engine that ``can_rescore`` them or not."""
    if q.num_candidates is not None:
        nc = min(MAX_CANDIDATES, max(k, q.num_candidates))
        why = f"num_candidates {nc} (HSP_QUERY__NUM_CANDIDATES)"
    else:
        nc = auto_candidates(k, shard_chunks)
        size = "shard size not known" if shard_chunks is None else f"largest shard {shard_chunks:,} chunks"
        why = f"num_candidates {nc} for k {k} ({size})"
    oversample: float | None = None
    if q.rescore_oversample == 0:
        why += "; no rescoring (HSP_QUERY__RESCORE_OVERSAMPLE=0)"
    elif not quantized:
        why += "; float vectors, nothing to rescore"
    elif not can_rescore:
        why += "; quantized vectors, not rescored (the engine cannot)"
    else:
        oversample = q.rescore_oversample or DEFAULT_OVERSAMPLE
        nc = min(MAX_CANDIDATES, max(nc, math.ceil(k * oversample)))
        why += f"; quantized vectors rescored on their floats ({oversample:g} × k)"
    return KnnWidth(nc, oversample, why)
