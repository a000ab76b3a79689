"""``hsp doctor``: is everything a search needs in place, and if not, how to fix it. Each check returns a
:class:`Check` (OK, WARN, FAIL or SKIP, what it found, the fix); the areas run in order: the cluster, the index, the
log indices and the models (a reranker problem is a WARN: searches then keep the fused order)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any, Literal

import httpx

from hybridsearch.cluster_url import redact_url
from hybridsearch.engine import EngineClient, EngineInfo, cluster_info, engine_errors, request
from hybridsearch.errors import AliasConflict, HybridSearchError, IndexMismatch, QueryError
from hybridsearch.index import spec
from hybridsearch.index.access import INGEST, WRITE_BLOCKS, check_privileges, prefix_names, unblock_fix
from hybridsearch.index.versions import index_meta, live_target, read_alias
from hybridsearch.index.visibility import count_visible
from hybridsearch.ingest.lease import UNFINISHED, hidden_documents
from hybridsearch.query.fusion import fusion_for
from hybridsearch.settings import (
    EmbeddingSettings,
    IndexSettings,
    ModelsSettings,
    QuerySettings,
    RerankerSettings,
    Settings,
)

Status = Literal["OK", "WARN", "FAIL", "SKIP"]


@dataclass
class Check:
    """One line of the doctor's report."""

    area: str
    name: str
    status: Status
    detail: str
    fix: str | None = None


#: the fix of an error that names none: Elasticsearch refused for a reason of its own
REFUSED = "Elasticsearch refused the request: its log says why (`hsp -v doctor` shows the request)"


def problem(exc: HybridSearchError) -> tuple[str, str]:
    """(what went wrong, how to fix it) for an error of a check: the error's own ``problem`` and ``fix``."""
    return exc.problem or str(exc), exc.fix or REFUSED


def run_checks(settings: Settings, *, es: EngineClient | None = None, models: bool = True,
               reranker: bool = True) -> list[Check]:
    """Every check, in order; index checks are skipped when the cluster does not answer."""
    es = es or EngineClient(settings.es, max_retries=0, request_timeout=10.0)
    checks = check_cluster(es)
    if checks[0].status == "FAIL":
        checks.append(Check("index", "index", "SKIP", "cluster unreachable"))
    else:
        checks += check_index(es, settings)
        checks += [check_log_index(es, settings, kind) for kind in spec.LOG_KINDS]
    checks.append(check_embedder(settings.embedding, settings.models) if models
                  else Check("models", "embedder", "SKIP", "--no-models"))
    checks.append(check_reranker(settings.reranker, settings.models) if reranker
                  else Check("reranker", "reranker", "SKIP", "--no-reranker"))
    return checks


def failed(checks: list[Check], strict: bool = False) -> bool:
    """True when any check FAILed (or, with ``strict``, WARNed)."""
    bad = {"FAIL", "WARN"} if strict else {"FAIL"}
    return any(c.status in bad for c in checks)


_SIZE = re.compile(r"^\s*([0-9.]+)\s*([kmgtp]?b)?\s*$", re.I)
_UNITS = {"b": 1, "kb": 1024, "mb": 1024**2, "gb": 1024**3, "tb": 1024**4, "pb": 1024**5}
_WATERMARK = "cluster.routing.allocation.disk.watermark."
#: a cluster's or an index's health as a check's status
HEALTH: dict[str, Status] = {"green": "OK", "yellow": "WARN"}


def watermark_used_fraction(value: str, total_bytes: int) -> float:
    """A disk watermark (``"85%"``, ``"0.85"`` or free space like ``"1gb"``) as a used-space fraction."""
    value = value.strip().lower()
    if value.endswith("%"):
        return float(value[:-1]) / 100
    m = _SIZE.match(value)
    if m and m.group(2) is None and float(m.group(1)) <= 1.0:
        return float(m.group(1))
    if m:
        free = float(m.group(1)) * _UNITS[(m.group(2) or "b").lower()]
        return max(0.0, 1 - free / total_bytes) if total_bytes else 1.0
    raise ValueError(f"unreadable disk watermark {value!r}")


def check_cluster(es: EngineClient) -> list[Check]:
    """Reachable, version, health, disk. The first check FAILs when no node answers or refuses us."""
    try:
        info = cluster_info(es)
    except HybridSearchError as exc:
        return [Check("cluster", "reachable", "FAIL", *problem(exc))]
    checks = [Check("cluster", "reachable", "OK", f"{info['cluster_name']}, {info['number_of_nodes']} node(s)")]
    versions, kind = info["versions"], es.engine.kind
    oldest = EngineInfo(kind, min(versions, key=lambda v: EngineInfo(kind, v).version_tuple or ()))
    label = f"{kind} {', '.join(versions)}"
    if (why := oldest.support_problem()) is not None:
        checks.append(Check("cluster", "version", "FAIL", label, why + "; upgrade the cluster"))
    else:
        checks.append(Check("cluster", "version", "OK" if len(versions) == 1 else "WARN", label,
                            None if len(versions) == 1 else "finish the rolling upgrade"))
    status = info["status"]
    fixes = {"yellow": "replicas cannot be allocated: on a single node set HSP_INDEX__REPLICAS=0 "
                       "(and `PUT <index>/_settings {\"number_of_replicas\": 0}` for existing indices)",
             "red": "a primary shard is unassigned: see `GET _cluster/allocation/explain`"}
    return [*checks, Check("cluster", "health", HEALTH.get(status, "FAIL"), status, fixes.get(status)),
            _check_disk(es)]


def _check_disk(es: EngineClient) -> Check:
    try:
        with engine_errors("node disk stats"):
            nodes = es.send(request.Request("GET", "/_nodes/stats/fs",
                                            request.params(filter_path="nodes.*.name,nodes.*.fs.total")))
        with engine_errors("cluster settings"):
            flat = es.send(request.Request("GET", "/_cluster/settings",
                                           request.params(include_defaults=True, flat_settings=True)))
    except HybridSearchError as exc:
        detail, fix = problem(exc)
        return Check("cluster", "disk", "WARN", f"cannot read disk usage: {detail}", fix)
    disks = [(node.get("name", "?"), int(node["fs"]["total"].get("available_in_bytes", 0)),
              int(node["fs"]["total"].get("total_in_bytes", 0))) for node in nodes.get("nodes", {}).values()]
    if not disks:
        return Check("cluster", "disk", "WARN", "no node reported disk usage")
    name, avail, total = max(disks, key=lambda d: 1 - d[1] / d[2] if d[2] else 0.0)
    used = 1 - avail / total if total else 0.0
    detail = f"{name}: {used:.0%} used, {avail / 1024**3:.1f} GiB free of {total / 1024**3:.1f} GiB"
    levels = {key.removeprefix(_WATERMARK): watermark_used_fraction(value, total)
              for scope in ("defaults", "persistent", "transient") for key, value in flat.get(scope, {}).items()
              if key.removeprefix(_WATERMARK) in ("low", "high") and isinstance(value, str)}
    if used >= levels.get("high", 0.90):
        return Check("cluster", "disk", "FAIL", detail + " (over the high watermark: shards move away; at the "
                     "flood stage indices turn read-only)", "free disk space or add a node")
    if used >= levels.get("low", 0.85):
        return Check("cluster", "disk", "WARN", detail + " (over the low watermark: no new replicas here)",
                     "free disk space before the high watermark is reached")
    return Check("cluster", "disk", "OK", detail)


#: deleted copies below this are normal churn (changed documents are overwritten in place)
DELETED_WARN_MIN = 1000


def check_access(es: EngineClient, index: IndexSettings) -> Check:
    """What the credentials may do on the prefix: ingest and manage or only search (OK), not even search (FAIL)."""
    got = check_privileges(es, prefix_names(index), INGEST)
    pattern = f"{index.prefix}-*"
    if not got.enforced:  # the engine says why (security off, or no such API)
        return Check("index", "privileges", "OK", got.unchecked or "not checked ahead")
    if not got.missing:
        return Check("index", "privileges", "OK", f"{got.user} may ingest, search and manage {pattern}")
    if not {"read", "view_index_metadata"} & set(got.missing):
        return Check("index", "privileges", "OK", f"{got.user} may search {pattern} (read-only: ingesting "
                     f"would be refused, missing {got.describe()})")
    return Check("index", "privileges", "FAIL", f"{got.user} may not search {pattern}: missing {got.describe()}",
                 "use credentials whose role grants the prefix's privileges (docs/operations.md, 'Roles'), "
                 "or set HSP_INDEX__PREFIX to a prefix they own")


def check_analyzer(es: EngineClient, index: IndexSettings) -> Check:
    """Which analyzer new indices get (``auto``: english where the cluster has it) and what is lost without."""
    chosen = index.analyzer if index.analyzer != "auto" else spec.PREFERRED_ANALYZER
    with engine_errors(f"check the {chosen} analyzer"):
        known = spec.has_analyzer(es, chosen)
    if index.analyzer != "auto":
        return Check("index", "analyzer", "OK" if known else "FAIL", f"{chosen} (HSP_INDEX__ANALYZER)",
                     None if known else f"the cluster has no analyzer {chosen}: pick another")
    if known:
        return Check("index", "analyzer", "OK", "english (stemming, stop words) for new indices")
    return Check("index", "analyzer", "WARN", "standard: this cluster has no english analyzer, so BM25 matches "
                 "exact word forms only (no stemming, stop words count)", "run a distribution with the "
                 "analysis-common module (the full Elasticsearch, or OpenSearch) for English stemming")


def check_index(es: EngineClient, settings: Settings) -> list[Check]:
    """Privileges, alias, ``_meta`` against the configured model, vector dims, chunk count."""
    try:
        checks = [check_access(es, settings.index)]
    except HybridSearchError as exc:  # say why, then check what can still be read
        checks = [Check("index", "privileges", "FAIL", *problem(exc))]
    try:
        checks += _check_live_index(es, settings)
    except HybridSearchError as exc:
        checks.append(Check("index", "index", "FAIL", *problem(exc)))
    try:
        checks.append(check_analyzer(es, settings.index))
    except HybridSearchError as exc:  # e.g. credentials that may neither _analyze nor read the nodes' modules
        checks.append(Check("index", "analyzer", "WARN", f"cannot tell which analyzer new indices get: "
                            f"{exc.problem}", exc.fix))
    return checks


def _check_live_index(es: EngineClient, settings: Settings) -> list[Check]:
    alias = settings.index.alias
    aliases = read_alias(es, alias)
    if not aliases:
        return [Check("index", "alias", "FAIL", f"{alias} does not exist",
                      "ingest documents (`hsp ingest PATH` or `hsp demo`), or `hsp index create`")]
    live = max(aliases)
    try:
        live_target(alias, aliases)
        checks = [Check("index", "alias", "OK", f"{alias} → {live}")]
    except AliasConflict as exc:  # search and ingest refuse such an alias
        checks = [Check("index", "alias", "FAIL", exc.problem, exc.fix)]
    meta = index_meta(es, live)
    embedding = spec.follow_index(settings.embedding, meta)
    try:
        followed_settings = settings.model_copy(update={"embedding": embedding})
        spec.refuse(live, spec.meta_differences(meta, followed_settings, (spec.FORMAT_KEY, *spec.CHECKED_META)))
        followed = "" if embedding is settings.embedding else (
            f" (HSP_EMBEDDING__MODEL is unset: clients use it; `hsp index migrate --to-model "
            f"{settings.embedding.model}` moves it to the default model)")
        checks.append(Check("index", "model", "OK", f"{live} built with {meta.get('embedding_model')}{followed}"))
    except IndexMismatch as exc:
        other_format = exc.differences[0][0] == f"_meta.{spec.FORMAT_KEY}"
        checks.append(Check("index", "model", "FAIL", exc.problem, exc.fix if other_format else
                            f"set HSP_EMBEDDING__MODEL={meta.get('embedding_model')} "
                            f"HSP_EMBEDDING__DIMS={meta.get('embedding_dims')}, or `hsp index migrate --to-model "
                            f"{settings.embedding.model}`"))
    with engine_errors(f"mapping of {live}"):
        props = es.send(request.get_mapping(live))[live]["mappings"].get("properties", {})
        health = es.send(request.cluster_health(index=live))["status"]
        chunks = count_visible(es, live)
    holds = hidden_documents(es, settings.index.ingest_state)
    emb = props.get("embedding", {})
    vec = es.dialect.vector_summary(emb)
    if not vec.is_vector or vec.dims != settings.embedding.dims:
        checks.append(Check("index", "vectors", "FAIL",
                            f"embedding field is {emb.get('type')} with {vec.dims} dims, settings say "
                            f"{settings.embedding.dims}", "migrate to an index built for this model "
                                                          "(`hsp index migrate`)"))
    elif (unsafe := vec.unsafe_options) is not None:
        checks.append(Check("index", "vectors", "WARN", f"{live}: {unsafe}", "fine where the k-NN plugin has its "
                            "native libraries (managed domains); elsewhere `hsp index migrate` to a version built "
                            "on the lucene engine"))
    else:
        checks.append(Check("index", "vectors", "OK", f"{vec.dims} dims, {vec.similarity}, "
                                                      f"{vec.options.get('type', 'default')}"))
    checks += [*retrieval_checks(meta, settings.query), *_check_segments(es, live)]
    checks.append(Check("index", "health", HEALTH.get(health, "FAIL"), f"{live} is {health}",
                        None if health == "green" else "see `GET _cluster/allocation/explain`"))
    checks.append(Check("index", "chunks", "OK" if chunks else "WARN", f"{chunks:,} chunks in {live}",
                        None if chunks else "ingest documents: `hsp ingest PATH` or `hsp demo`"))
    if left := sorted(set(holds.get(UNFINISHED, []))):
        checks.append(Check("index", "hidden", "WARN", f"{len(left):,} documents of {live} were left half written by "
                            f"runs that stopped (e.g. {', '.join(left[:3])}) and are hidden from every search",
                            "re-run the same `hsp ingest` to finish them (what was written is reused), or "
                            "`hsp delete DOC_ID`"))
    elif pending := len({d for ids in holds.values() for d in ids}):
        checks.append(Check("index", "hidden", "OK", f"{pending:,} documents are being written by a running ingest "
                            "(hidden until each is whole)"))
    return checks


def _check_segments(es: EngineClient, live: str) -> list[Check]:
    """Warnings on the filtered-kNN setting the engine needs and on the share of deleted chunk copies."""
    want = es.engine.chunk_index_settings
    try:
        with engine_errors(f"settings and stats of {live}"):
            flat = es.send(request.get_settings(live, flat_settings=True))[live]["settings"] if want else {}
            docs = es.send(request.index_stats(live, metric="docs"))["_all"]["primaries"]["docs"]
    except HybridSearchError as exc:  # credentials without indices monitor: the other checks still stand
        return [Check("index", "segments", "WARN", f"cannot read {live}'s settings and stats: {exc.problem}", exc.fix)]
    checks = []
    if missing := {k: v for k, v in want.items() if str(flat.get(k)) != v}:
        setting = ", ".join(f"{k}: {v}" for k, v in missing.items())
        checks.append(Check("index", "knn filter", "WARN", f"{live} lacks {setting}: filtered kNN may use ACORN, "
                            "which misses most neighbours where many chunk copies are deleted",
                            f"run `hsp ingest` once (it sets it) or PUT {live}/_settings {{\"{setting}\"}}"))
    deleted, total = int(docs.get("deleted", 0)), int(docs.get("deleted", 0)) + int(docs.get("count", 0))
    if deleted >= DELETED_WARN_MIN and deleted > 0.2 * total:
        checks.append(Check("index", "deleted", "WARN", f"{deleted:,} of {total:,} documents in {live} are deleted "
                            "copies (disk, search time; an index rewritten in place many times)",
                            f"POST {live}/_forcemerge?only_expunge_deletes=true when the cluster is quiet"))
    return checks


def retrieval_checks(meta: dict[str, Any], query: QuerySettings) -> list[Check]:
    """What BM25 scores in the live index (``_meta``) and how its lists are fused (:func:`fusion_for`)."""
    words = spec.section_words_of(meta)
    if words is not None:
        bm25 = Check("index", "bm25", "OK", f"whole documents (sections of up to {words} words); kNN over chunks")
    else:
        bm25 = Check("index", "bm25", "WARN", "each chunk (an index without sections, or HSP_INDEX__BM25_UNIT=chunk): "
                     "whole documents rank better", "`hsp index migrate` builds a version with sections")
    try:
        fusion = fusion_for(query, meta)
    except QueryError as exc:
        return [bm25, Check("index", "fusion", "FAIL", exc.problem, exc.fix)]
    cal = meta.get("fusion_calibration")
    if fusion.source == "index" and isinstance(cal, dict):
        return [bm25, Check("index", "fusion", "OK", f"{fusion.label}, calibrated on {cal.get('dataset')} "
                            f"{cal.get('split')} ({cal.get('queries')} queries: nDCG@10 {cal.get('default')} with "
                            f"the default, {cal.get('chosen')} with this)")]
    if fusion.source == "index":
        return [bm25, Check("index", "fusion", "OK", f"{fusion.label}, recorded by `hsp index fusion`")]
    fix = None if fusion.source == "settings" else ("`hsp index fusion rrf|zscore|minmax` records one for the "
                                                    "index; with judgments, `hsp calibrate-fusion DATASET` picks one")
    return [bm25, Check("index", "fusion", "OK", fusion.describe(), fix)]


_LOG_WRITERS = {"query_log": "the first search", "ingest_runs": "the first `hsp ingest`",
                "ingest_state": "the first `hsp ingest`"}


def check_log_index(es: EngineClient, settings: Settings, kind: str) -> Check:
    """One log index: missing or without its write alias (WARN), not fitting its spec or write-blocked (FAIL)."""
    name = kind.replace("_", "-")
    try:
        with engine_errors(f"inspect the {name} index"):  # the first request may be the engine's detection
            wanted = spec.log_spec(settings, kind, es.dialect)
            index, alias = wanted.name, wanted.write_alias
            if not es.send(request.index_exists(index)):
                return Check("logs", name, "WARN", f"{index} does not exist yet",
                             f"nothing to do: {_LOG_WRITERS.get(kind, 'the next write')} creates it from its spec "
                             "(`hsp index create` does now)")
            mapping = next(iter(es.send(request.get_mapping(index)).values()))["mappings"]
            flat = es.send(request.get_settings(index, flat_settings=True)).get(index, {}).get("settings", {})
            health = str(es.send(request.cluster_health(index=index))["status"])
            alias_ok = not alias or index in es.send(request.get_alias(alias))
    except HybridSearchError as exc:
        return Check("logs", name, "WARN", f"cannot read the {name} index: {exc.problem}", exc.fix)
    blocks = [b for b in WRITE_BLOCKS if str(flat.get(b)).lower() == "true"]
    replicas = int(flat.get("index.number_of_replicas", 0))
    if differences := spec.log_differences(kind, mapping, settings, es.dialect):
        return Check("logs", name, "FAIL", f"{index} does not fit its spec (made by a write with guessed mappings, "
                     f"or by hand): {spec.describe(differences)}", f"reindex what you need from it, then DELETE "
                     f"{index}: the next write creates it from its spec (`hsp index create` does now)")
    if blocks:
        return Check("logs", name, "FAIL", f"{index} refuses writes: {', '.join(blocks)} is set",
                     unblock_fix(index, blocks[0]))
    if not alias_ok:
        return Check("logs", name, "WARN", f"{index} has no write alias {alias}: a write after the index "
                     "is deleted would create it with guessed mappings", f"`hsp index create` or the next "
                     f"`hsp ingest` adds it (needs manage on {settings.index.prefix}-*)")
    if health != "green":
        fix = (f"PUT {index}/_settings {{\"number_of_replicas\": {settings.index.replicas}}}"
               if replicas > settings.index.replicas else "see `GET _cluster/allocation/explain`")
        return Check("logs", name, "WARN" if health == "yellow" else "FAIL",
                     f"{index} is {health} ({replicas} replica(s), settings say {settings.index.replicas})", fix)
    return Check("logs", name, "OK", f"{index}: mapping fits, writable through {alias}, {health}")


def check_embedder(cfg: EmbeddingSettings, models: ModelsSettings) -> Check:
    """The embedding model loads and makes vectors of the configured size."""
    from hybridsearch.embedding.encoder import Embedder

    t0 = time.perf_counter()
    try:
        vec = Embedder(cfg, models).encode(["hybridsearch doctor"])
    except HybridSearchError as exc:
        return Check("models", "embedder", "FAIL", exc.problem,
                     exc.fix or "point HSP_EMBEDDING__MODEL at a local sentence-transformers folder and set "
                     "HSP_EMBEDDING__DIMS to its size")
    return Check("models", "embedder", "OK", f"{cfg.model}: {vec.shape[1]} dims, loaded in "
                                             f"{time.perf_counter() - t0:.1f} s")


def check_reranker(cfg: RerankerSettings, models: ModelsSettings) -> Check:
    """The reranker service is ready, or the local cross-encoder loads and scores a pair."""
    degrade = "searches will keep the fused order until this is fixed"
    if not cfg.enabled:
        return Check("reranker", "reranker", "OK", "disabled (HSP_RERANKER__ENABLED=false): fused order")
    if cfg.url:
        readyz = cfg.url.rstrip("/") + "/readyz"
        url = redact_url(readyz)  # what is shown: no credentials
        try:
            resp = httpx.get(readyz, timeout=min(cfg.timeout, 5.0))
        except httpx.HTTPError as exc:
            return Check("reranker", "service", "WARN", f"{url} does not answer ({type(exc).__name__}); {degrade}",
                         "start it (`hsp serve-reranker` or `docker compose up -d reranker`) or fix "
                         "HSP_RERANKER__URL")
        if resp.status_code == 200:
            return Check("reranker", "service", "OK", f"{redact_url(cfg.url)} ready")
        return Check("reranker", "service", "WARN", f"{url} answered {resp.status_code}: {resp.text[:200]}; "
                                                    f"{degrade}", "wait for the model to load, or read the "
                                                                  "service log")
    try:
        from hybridsearch.rerank import LocalReranker

        reranker = LocalReranker(cfg, models)
        reranker.score("doctor", ["a passage"])
    except HybridSearchError as exc:
        return Check("reranker", "local model", "WARN", f"{exc.problem}; {degrade}",
                     "set HSP_RERANKER__MODEL to a local cross-encoder folder, HSP_RERANKER__URL to a "
                     "reranker service, or HSP_RERANKER__ENABLED=false")
    from hybridsearch.rerank.base import effective_blend

    blend, source = effective_blend(cfg.blend, reranker.blend)
    return Check("reranker", "local model", "OK", f"{cfg.model} loads on {reranker.device} (max length "
                 f"{reranker.max_length}, blend {blend:g} from {source})")
