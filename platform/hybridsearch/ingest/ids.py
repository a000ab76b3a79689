"""Deterministic identifiers: chunk ``_id``, parent ids and the shard a document belongs to."""

from __future__ import annotations

import hashlib

MAX_ID_BYTES = 512  # Elasticsearch rejects longer _id values


def chunk_id(doc_id: str, position: int, signature: str, tenant: str | None = None) -> str:
    """``[tenant/]doc_id#position@signature``; a doc id too long for ``_id`` is replaced by its sha1."""
    base = f"{doc_id}#{position}@{signature}"
    if len(base.encode("utf-8")) > MAX_ID_BYTES - 80:
        base = f"sha1:{hashlib.sha1(doc_id.encode('utf-8')).hexdigest()}#{position}@{signature}"
    return f"{tenant}/{base}" if tenant else base


def parent_id(doc_id: str, start: int, end: int, signature: str) -> str:
    """Id of the parent span ``[start, end)`` of ``doc_id`` (stable across runs of one chunker)."""
    return chunk_id(doc_id, start, signature).replace(f"#{start}@", f"#p{start}-{end}@", 1)


def shard_of(doc_id: str, n: int) -> int:
    """Which of ``n`` shards ``doc_id`` falls in: the same on every machine and every run."""
    if n <= 1:
        return 0
    return int.from_bytes(hashlib.blake2b(doc_id.encode("utf-8"), digest_size=8).digest(), "big") % n


def parse_shard(text: str) -> tuple[int, int]:
    """``"i/N"`` → ``(i, N)``; raises ValueError unless 0 <= i < N."""
    try:
        i, n = (int(p) for p in text.split("/"))
    except ValueError:
        raise ValueError(f"shard {text!r} is not i/N, e.g. 0/4") from None
    if not (n >= 1 and 0 <= i < n):
        raise ValueError(f"shard {text!r}: need 0 <= i < N")
    return i, n
