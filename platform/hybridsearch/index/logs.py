"""The log indices (query log, ingest runs, ingest state): created from their specs and written by
:class:`LogWriter` through a write alias with ``require_alias=true``, so that no write creates one with guessed
mappings (a deleted index takes its alias along; the writer re-creates it and writes again)."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hybridsearch.engine import Sender, engine_errors, request
from hybridsearch.errors import AccessDenied, ClusterError, HybridSearchError, IndexNotFound
from hybridsearch.index.access import bulk_error_type, item_error, require_privileges, write_errors
from hybridsearch.index.spec import LOG_KINDS, add_alias_if_missing, create_index, log_spec, write_alias_name
from hybridsearch.settings import Settings

log = logging.getLogger(__name__)


def ensure_log_indices(es: Sender, settings: Settings, kinds: Sequence[str] = LOG_KINDS) -> None:
    """Create each log index of ``kinds`` from its spec, or add new fields and a missing write alias to an existing
    one. Raises ClusterError (a conflicting field change)."""
    for kind in kinds:
        spec = log_spec(settings, kind, es.dialect)
        with write_errors(spec.name, f"create or update {spec.name}"):
            if es.send(request.index_exists(spec.name)):
                es.send(request.put_mapping(spec.name, properties=spec.mappings["properties"]))
                if spec.write_alias:
                    add_alias_if_missing(es, spec.write_alias, spec.name)
            elif create_index(es, spec):
                log.info("created %s", spec.name)


@dataclass
class LogWrite:
    """What :meth:`LogWriter.write` did: documents written, failed, and the first failure's error."""

    written: int = 0
    failed: int = 0
    error: HybridSearchError | None = None

    def fail(self, count: int, error: HybridSearchError) -> None:
        self.failed += count
        self.error = self.error or error


class LogWriter:
    """Writes documents to one log index, never creating it by a write; thread-safe, ``write`` never raises."""

    def __init__(self, es: Sender, settings: Settings, kind: str) -> None:
        self.es, self.settings, self.kind = es, settings, kind
        self.index: str = getattr(settings.index, kind)
        self.alias = write_alias_name(settings.index, kind)
        self._direct = False  # write by name (after an existence check), not through the alias
        self._lock = threading.Lock()

    def ensure(self) -> None:
        """Create the index when missing (AccessDenied if not allowed); add a missing write alias, or write by name."""
        with self._lock:
            with engine_errors(f"check {self.index}"):
                exists = self.es.send(request.index_exists(self.index))
            if not exists:
                require_privileges(self.es, [self.index, self.alias], ("create_index", "manage"),
                                   f"create {self.index}")
                ensure_log_indices(self.es, self.settings, (self.kind,))
                self._direct = False
                return
            try:
                with write_errors(self.index, f"add the write alias {self.alias} to {self.index}"):
                    add_alias_if_missing(self.es, self.alias, self.index)
                self._direct = False
            except AccessDenied as exc:
                if not self._direct:
                    log.warning("%s: writing to %s by name (may not add the write alias %s: %s)", self.kind,
                                self.index, self.alias, exc.problem)
                self._direct = True

    def write(self, docs: Sequence[tuple[str | None, Mapping[str, Any]]], *, op_type: str = "create",
              refresh: str | None = None) -> LogWrite:
        """Write ``(id or None, document)`` pairs with ``op_type``; a write finding the index gone re-creates it."""
        pending = [(i or uuid.uuid4().hex, d) for i, d in docs]
        result = LogWrite()
        for attempt in (1, 2):
            if attempt == 2 or self._direct:
                try:
                    self.ensure()
                except HybridSearchError as exc:
                    result.fail(len(pending), exc)
                    return result
            pending = self._send(pending, op_type, refresh, result)
            if not pending:
                return result
        result.fail(len(pending), ClusterError(f"{self.index} disappeared again while it was being written",
                                               fix=f"find out who deletes {self.index}: the platform re-creates it"))
        return result

    def _send(self, docs: list[tuple[str, Mapping[str, Any]]], op_type: str, refresh: str | None,
              result: LogWrite) -> list[tuple[str, Mapping[str, Any]]]:
        """One bulk request, counted in ``result``; returns the documents refused because the index is missing."""
        target = self.index if self._direct else self.alias
        body_key = "doc" if op_type == "update" else "_source"
        actions = [{"_op_type": op_type, "_index": target, "_id": i, body_key: dict(d)} for i, d in docs]
        doing = f"write {len(docs)} document(s) to {self.index}"
        try:
            with write_errors(self.index, doing):
                ok, items = request.bulk_failures(self.es.send(request.bulk(
                    actions, refresh=refresh or None, require_alias=None if self._direct else True)))
        except IndexNotFound:
            return list(docs)
        except HybridSearchError as exc:
            result.fail(len(docs), exc)
            return []
        result.written += ok
        by_id = dict(docs)
        missing: list[tuple[str, Mapping[str, Any]]] = []
        for entry in items:
            item = next(iter(entry.values()))
            if bulk_error_type(item.get("error")) == "index_not_found_exception" and item.get("_id") in by_id:
                missing.append((item["_id"], by_id[item["_id"]]))
            else:
                result.fail(1, item_error(item, self.index, doing))
        return missing
