"""The doctor's index checks: privileges on the prefix, the alias, the live index's ``_meta`` against the
configured model, vectors, segments (the filtered-kNN setting, deleted copies), what BM25 scores and how the lists
are fused, health, chunk count, documents hidden by unfinished runs, and the analyzer new indices get."""

from __future__ import annotations

from typing import Any

from hybridsearch.doctor.check import Check, problem
from hybridsearch.engine import EngineClient, engine_errors, request, unsafe_vector_options
from hybridsearch.errors import (
    AliasConflict,
    HybridSearchError,
    IndexMismatch,
    QueryError,
)
from hybridsearch.index.access import INGEST, check_privileges, prefix_names
from hybridsearch.index.fit import CHECKED_META, FORMAT_KEY, check_meta
from hybridsearch.index.spec import PREFERRED_ANALYZER, resolve_analyzer, section_words_of
from hybridsearch.index.versions import index_meta, live_target, read_alias
from hybridsearch.index.visibility import count_visible
from hybridsearch.ingest.lease import UNFINISHED, hidden_documents
from hybridsearch.query.fusion import fusion_for
from hybridsearch.settings import IndexSettings, QuerySettings, Settings

#: deleted copies below this are normal churn (changed documents are overwritten in place)
DELETED_WARN_MIN = 1000


def check_access(es: EngineClient, index: IndexSettings) -> Check:
    """What the credentials may do on the prefix: ingest and manage (OK), only search (OK, read-only), or
    not even search (FAIL)."""
    got = check_privileges(es, prefix_names(index), INGEST)
    pattern = f"{index.prefix}-*"
    if not got.enforced:  # the engine says why (security off, or no such API)
        return Check("index", "privileges", "OK", got.unchecked or "not checked ahead")
    if got.ok:
        return Check("index", "privileges", "OK", f"{got.user} may ingest, search and manage {pattern}")
    if not {"read", "view_index_metadata"} & set(got.missing):
        return Check("index", "privileges", "OK", f"{got.user} may search {pattern} (read-only: ingesting "
                     f"would be refused, missing {got.describe()})")
    return Check("index", "privileges", "FAIL", f"{got.user} may not search {pattern}: missing {got.describe()}",
                 "use credentials whose role grants the prefix's privileges (docs/operations.md, 'Roles'), "
                 "or set HSP_INDEX__PREFIX to a prefix they own")


def check_analyzer(es: EngineClient, index: IndexSettings) -> Check:
    """Which analyzer new indices get (``auto``: english where the cluster has it) and what is lost without."""
    chosen = resolve_analyzer(es, index)
    if index.analyzer != "auto":
        known = es.has_analyzer(chosen)
        return Check("index", "analyzer", "OK" if known else "FAIL", f"{chosen} (HSP_INDEX__ANALYZER)",
                     None if known else f"the cluster has no analyzer {chosen}: pick another")
    if chosen == PREFERRED_ANALYZER:
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
        _check_live_index(es, settings, checks)
    except HybridSearchError as exc:
        checks.append(Check("index", "index", "FAIL", *problem(exc)))
    try:
        checks.append(check_analyzer(es, settings.index))
    except HybridSearchError as exc:  # e.g. credentials that may neither _analyze nor read the nodes' modules
        checks.append(Check("index", "analyzer", "WARN", f"cannot tell which analyzer new indices get: "
                            f"{exc.problem}", exc.fix))
    return checks


def _check_live_index(es: EngineClient, settings: Settings, checks: list[Check]) -> None:
    alias = settings.index.alias
    aliases = read_alias(es, alias)
    targets = sorted(aliases)
    if not targets:
        checks.append(Check("index", "alias", "FAIL", f"{alias} does not exist",
                            "ingest documents (`hsp ingest PATH` or `hsp demo`), or `hsp index create`"))
        return
    live = targets[-1]
    try:
        live_target(alias, aliases)
        checks.append(Check("index", "alias", "OK", f"{alias} → {live}"))
    except AliasConflict as exc:  # search and ingest refuse such an alias
        checks.append(Check("index", "alias", "FAIL", exc.problem, exc.fix))
    meta = index_meta(es, live)
    try:
        check_meta(live, meta, settings, (FORMAT_KEY, *CHECKED_META))
        checks.append(Check("index", "model", "OK", f"{live} built with {meta.get('embedding_model')}"))
    except IndexMismatch as exc:
        other_format = exc.differences[0][0] == f"_meta.{FORMAT_KEY}"
        checks.append(Check("index", "model", "FAIL", exc.problem, exc.fix if other_format else
                            f"set HSP_EMBEDDING__MODEL={meta.get('embedding_model')} "
                            f"HSP_EMBEDDING__DIMS={meta.get('embedding_dims')}, or `hsp index migrate --to-model "
                            f"{settings.embedding.model}`"))
    with engine_errors(f"mapping of {live}"):
        props = es.send(request.get_mapping(live))[live]["mappings"].get("properties", {})
        health = es.send(request.cluster_health(index=live))["status"]
        chunks = count_visible(es, live)
    holds = hidden_documents(es, settings.index.ingest_state)
    pending = len({d for ids in holds.values() for d in ids})
    emb = props.get("embedding", {})
    vec = es.dialect.vector_summary(emb)
    if not vec.is_vector or vec.dims != settings.embedding.dims:
        checks.append(Check("index", "vectors", "FAIL",
                            f"embedding field is {emb.get('type')} with {vec.dims} dims, settings say "
                            f"{settings.embedding.dims}", "migrate to an index built for this model "
                                                          "(`hsp index migrate`)"))
    elif (unsafe := unsafe_vector_options(vec)) is not None:
        checks.append(Check("index", "vectors", "WARN", f"{live}: {unsafe}", "fine where the k-NN plugin has its "
                            "native libraries (managed domains); elsewhere `hsp index migrate` to a version built "
                            "on the lucene engine"))
    else:
        checks.append(Check("index", "vectors", "OK", f"{vec.dims} dims, {vec.similarity}, "
                                                      f"{vec.options.get('type', 'default')}"))
    checks += retrieval_checks(meta, settings.query)
    checks += _check_segments(es, live)
    checks.append(Check("index", "health", {"green": "OK", "yellow": "WARN"}.get(health, "FAIL"),  # type: ignore[arg-type]
                        f"{live} is {health}", None if health == "green" else "see `GET _cluster/allocation/explain`"))
    checks.append(Check("index", "chunks", "OK" if chunks else "WARN", f"{chunks:,} chunks in {live}",
                        None if chunks else "ingest documents: `hsp ingest PATH` or `hsp demo`"))
    left = sorted(set(holds.get(UNFINISHED, [])))
    if left:
        checks.append(Check("index", "hidden", "WARN", f"{len(left):,} documents of {live} were left half written by "
                            f"runs that stopped (e.g. {', '.join(left[:3])}) and are hidden from every search",
                            "re-run the same `hsp ingest` to finish them (what was written is reused), or "
                            "`hsp delete DOC_ID`"))
    elif pending:
        checks.append(Check("index", "hidden", "OK", f"{pending:,} documents are being written by a running ingest "
                            "(hidden until each is whole)"))


def _check_segments(es: EngineClient, live: str) -> list[Check]:
    """The filtered-kNN setting the engine needs (``EngineInfo.chunk_index_settings``) and the share of deleted
    chunk copies (changed documents overwritten in place): warnings only, the searches still work."""
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
    words = section_words_of(meta)
    if words is not None:
        bm25 = Check("index", "bm25", "OK", f"whole documents (sections of up to {words} words); kNN over chunks")
    else:
        bm25 = Check("index", "bm25", "WARN", "each chunk: the index was built before whole-document BM25 or with "
                     "HSP_INDEX__BM25_UNIT=chunk (SciFact: BM25 nDCG@10 0.673 on chunks, 0.692 on documents)",
                     "`hsp index migrate` builds a version with sections")
    try:
        fusion = fusion_for(query, meta)
    except QueryError as exc:
        return [bm25, Check("index", "fusion", "FAIL", exc.problem, exc.fix)]
    cal = meta.get("fusion_calibration")
    if fusion.source == "index" and isinstance(cal, dict):
        detail = (f"{fusion.label}, calibrated on {cal.get('dataset')} {cal.get('split')} ({cal.get('queries')} "
                  f"queries: nDCG@10 {cal.get('default')} with the default, {cal.get('chosen')} with this)")
        return [bm25, Check("index", "fusion", "OK", detail)]
    if fusion.source == "index":
        return [bm25, Check("index", "fusion", "OK", f"{fusion.label}, recorded by `hsp index fusion`")]
    fix = None if fusion.source == "settings" else ("`hsp index fusion rrf|zscore|minmax` records one for the "
                                                    "index; with judgments, `hsp calibrate-fusion DATASET` picks one")
    return [bm25, Check("index", "fusion", "OK", fusion.describe(), fix)]
