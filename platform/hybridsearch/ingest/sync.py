"""Ingestion that mirrors its source (``hsp ingest SOURCE --sync``): the stored documents that came from SOURCE
(:func:`owned_query`), what a sync would add, replace and delete (:func:`plan_sync`), and how much it may delete.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hybridsearch.engine import EngineClient, engine_errors, request
from hybridsearch.errors import ConfigError
from hybridsearch.index.versions import read_alias
from hybridsearch.ingest.lease import owns
from hybridsearch.ingest.sources import RecordFields, SourceFailure, read_path
from hybridsearch.settings import IndexSettings, IngestSettings


def owned_query(root: Path, tenant: str | None) -> dict[str, Any]:
    """Chunks whose ``source`` is the file ``root`` or a file under the folder ``root`` (and in ``tenant``)."""
    own: dict[str, Any] = ({"prefix": {"source": f"{root.as_posix().rstrip('/')}/"}} if root.is_dir()
                           else {"term": {"source": str(root)}})
    return {"bool": {"filter": [own, *([{"term": {"tenant": tenant}}] if tenant else [])]}}


def owned_documents(es: EngineClient, index: str, root: Path, tenant: str | None,
                    shard: tuple[int, int] | None = None) -> dict[str, str]:
    """``{doc_id: content_hash}`` (chunk 0's where it is there) of the documents from ``root`` in ``index`` (none
    without it), hidden ones and any chunk a stopped run left included; only those of ``shard`` when given."""
    with engine_errors(f"look up the documents of {root}"):
        if not es.send(request.index_exists(index)):
            return {}
        es.send(request.refresh(index))
        query = {"query": owned_query(root, tenant), "_source": ["doc_id", "content_hash", "position"]}
        found: dict[str, str] = {}
        for h in es.scan(index=index, query=query, size=1000):  # every chunk: a stopped delete may have left any
            src = h["_source"]
            if src.get("position") == 0 or src["doc_id"] not in found:
                found[src["doc_id"]] = str(src.get("content_hash") or "")
    return {d: h for d, h in found.items() if owns(shard, d)}


def refusal(root: Path, deleting: int, owned: int, cfg: IngestSettings) -> ConfigError | None:
    """The one-line refusal of a sync deleting ``deleting`` of the source's ``owned`` documents when that is more
    than ``sync_max_delete`` of them, else None."""
    if not (owned > 0 and deleting / owned > cfg.sync_max_delete):
        return None
    return ConfigError(f"sync of {root} would delete {deleting:,} of its {owned:,} documents, more than "
                       f"HSP_INGEST__SYNC_MAX_DELETE={cfg.sync_max_delete:g} of them; nothing was written",
                       fix="Check the source is complete; `--dry-run` lists what would go, `--force` deletes anyway")


@dataclass
class SyncPlan:
    """What a sync of ``source`` would do: document ids to add, replace and delete, unchanged and failed counts."""

    source: str
    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    unchanged: int = 0
    owned: int = 0
    failures: list[str] = field(default_factory=list)  # "source: reason" of what could not be read: deletes nothing


def plan_sync(path: str | Path, cfg: IndexSettings, es: EngineClient, fields: RecordFields | None = None,
              shard: tuple[int, int] | None = None) -> SyncPlan:
    """Read ``path`` and compare it with what the index behind ``cfg``'s alias holds from it; writes nothing. A
    source not read whole would delete nothing (``deleted`` empty, ``failures`` says why)."""
    root = Path(path).resolve()
    owned: dict[str, str] = {}
    for index in sorted(read_alias(es, cfg.alias)):
        owned.update(owned_documents(es, index, root, cfg.tenant, shard))
    plan = SyncPlan(str(root), owned=len(owned))
    yielded: set[str] = set()
    for item in read_path(root, fields):
        if not owns(shard, item.doc_id or item.source):
            continue
        if isinstance(item, SourceFailure):
            plan.failures.append(f"{item.source}: {item.reason}")
        elif item.doc_id in yielded:
            plan.failures.append(f"{item.source}: duplicate doc_id {item.doc_id!r}")
        else:
            yielded.add(item.doc_id)
            if item.doc_id not in owned:
                plan.added.append(item.doc_id)
            elif owned[item.doc_id] != item.content_hash:
                plan.replaced.append(item.doc_id)
            else:
                plan.unchanged += 1
    if not plan.failures:
        plan.deleted = sorted(set(owned) - yielded)
    return plan
