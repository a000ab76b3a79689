"""Deterministic ids, shards and the bulk backoff schedule."""

from __future__ import annotations

from collections import Counter

import pytest

from hybridsearch.ingest.chunking import MAX_ID_BYTES, chunk_id, parent_id
from hybridsearch.ingest.lease import parse_shard, shard_of


def test_chunk_ids_are_deterministic_and_fit_elasticsearch() -> None:
    assert chunk_id("doc", 3, "paragraph-200-0.12-v1") == "doc#3@paragraph-200-0.12-v1"
    assert chunk_id("doc", 3, "sig", tenant="acme") == "acme/doc#3@sig"
    long_id = "folder/" * 200 + "file.txt"
    cid = chunk_id(long_id, 0, "sig")
    assert cid == chunk_id(long_id, 0, "sig") and len(cid.encode()) <= MAX_ID_BYTES
    assert cid != chunk_id(long_id + "x", 0, "sig")
    assert parent_id("doc", 0, 120, "sig") == "doc#p0-120@sig"


def test_shards_are_stable_and_balanced() -> None:
    ids = [f"doc-{i}" for i in range(4000)]
    counts = Counter(shard_of(i, 4) for i in ids)
    assert set(counts) == {0, 1, 2, 3} and min(counts.values()) > 850
    assert [shard_of(i, 4) for i in ids[:50]] == [shard_of(i, 4) for i in ids[:50]]
    assert shard_of("anything", 1) == 0
    assert shard_of("doc-1", 3) == 1  # fixed: the same on every machine and Python run


def test_parse_shard() -> None:
    assert parse_shard("1/4") == (1, 4)
    for bad in ("4/4", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(ValueError):
            parse_shard(bad)
