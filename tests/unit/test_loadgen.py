"""ops/bench/loadgen.py: degraded answers are counted per kind of reason (numbers masked)."""

from __future__ import annotations

import asyncio

from ops_modules import load_ops

loadgen = load_ops("loadgen")
drive, reason_kind = loadgen.drive, loadgen.reason_kind


def test_reason_kind_masks_numbers() -> None:
    a = reason_kind("reranker error: reranker service at http://127.0.0.1:49121 answered 503: overloaded: "
                    "waited 4.0s in the queue; retry after 21s")
    b = reason_kind("reranker error: reranker service at http://127.0.0.1:49121 answered 503: overloaded: "
                    "waited 4.1s in the queue; retry after 3s")
    assert a == b and "#s in the queue" in a
    assert reason_kind("reranker timeout after 10.0s") == "reranker timeout after #s"


def test_drive_counts_degraded_answers_per_kind() -> None:
    replies = iter(["reranker timeout after 10.0s", None, "reranker timeout after 5s", "boom 1"] * 10)

    async def call(q: str) -> str | None:
        return next(replies)

    res = asyncio.run(drive("s", call, ["q"], concurrency=1, seconds=5.0, max_requests=8))
    assert (res.ok, res.degraded, res.errors) == (2, 6, 0)
    assert res.degraded_reasons == {"reranker timeout after #s": 4, "boom #": 2}
    assert res.summary()["degraded_reasons"] == res.degraded_reasons
