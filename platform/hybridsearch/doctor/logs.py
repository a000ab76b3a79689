"""The doctor's log-index checks: each log index exists, its mapping fits its spec, it is not blocked, its
write alias points at it, and its health."""

from __future__ import annotations

from hybridsearch.doctor.check import Check
from hybridsearch.engine import EngineClient, engine_errors
from hybridsearch.errors import HybridSearchError
from hybridsearch.index.access import unblock_fix
from hybridsearch.index.fit import describe
from hybridsearch.index.logs import inspect_log_index
from hybridsearch.index.spec import LOG_KINDS
from hybridsearch.settings import Settings

_LOG_WRITERS = {"query_log": "the first search", "ingest_runs": "the first `hsp ingest`",
                "ingest_state": "the first `hsp ingest`"}


def check_log_index(es: EngineClient, settings: Settings, kind: str) -> Check:
    """One log index against its spec (``index.logs.inspect_log_index``): missing (WARN: created by the next write
    with its mappings), a mapping that does not fit (FAIL: made by a write with guessed mappings, or by hand), a
    write block (FAIL), no write alias (WARN: writes could create it with guessed mappings), health."""
    name = kind.replace("_", "-")
    try:
        with engine_errors(f"inspect the {name} index"):  # the first request may be the engine's detection
            st = inspect_log_index(es, settings, kind)
    except HybridSearchError as exc:
        return Check("logs", name, "WARN", f"cannot read the {name} index: {exc.problem}", exc.fix)
    if not st.exists:
        return Check("logs", name, "WARN", f"{st.name} does not exist yet",
                     f"nothing to do: {_LOG_WRITERS.get(kind, 'the next write')} creates it from its spec "
                     "(`hsp index create` does now)")
    if st.differences:
        return Check("logs", name, "FAIL", f"{st.name} does not fit its spec (made by a write with guessed mappings, "
                     f"or by hand): {describe(st.differences)}", f"reindex what you need from it, then DELETE "
                     f"{st.name}: the next write creates it from its spec (`hsp index create` does now)")
    if st.blocks:
        block = st.blocks[0]
        return Check("logs", name, "FAIL", f"{st.name} refuses writes: {', '.join(st.blocks)} is set",
                     unblock_fix(st.name, block))
    if not st.alias_ok:
        return Check("logs", name, "WARN", f"{st.name} has no write alias {st.write_alias}: a write after the index "
                     "is deleted would create it with guessed mappings", f"`hsp index create` or the next "
                     f"`hsp ingest` adds it (needs manage on {settings.index.prefix}-*)")
    via = f" through {st.write_alias}" if st.write_alias else ""
    if st.health not in (None, "green"):
        fix = (f"PUT {st.name}/_settings {{\"number_of_replicas\": {settings.index.replicas}}}"
               if (st.replicas or 0) > settings.index.replicas else "see `GET _cluster/allocation/explain`")
        return Check("logs", name, "WARN" if st.health == "yellow" else "FAIL",
                     f"{st.name} is {st.health} ({st.replicas} replica(s), settings say {settings.index.replicas})",
                     fix)
    return Check("logs", name, "OK", f"{st.name}: mapping fits, writable{via}, {st.health}")


def check_log_indices(es: EngineClient, settings: Settings) -> list[Check]:
    """:func:`check_log_index` for the query log, the ingest runs and the ingest state."""
    return [check_log_index(es, settings, kind) for kind in LOG_KINDS]
