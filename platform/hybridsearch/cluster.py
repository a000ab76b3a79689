"""The one place that builds Elasticsearch clients and translates their exceptions.

``make_client`` / ``make_async_client`` build clients from :class:`ClusterSettings` (auth, TLS,
timeouts, retries on 429/502/503/504 and on connection errors). ``es_errors()`` wraps calls so
that ``elasticsearch`` exceptions come out as :mod:`hybridsearch.errors` types.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import elasticsearch
from elasticsearch import AsyncElasticsearch, Elasticsearch

from hybridsearch.errors import ClusterError, ClusterUnavailable, HybridSearchError, IndexNotFound
from hybridsearch.settings import ClusterSettings

RETRY_STATUSES = (429, 502, 503, 504)


def client_kwargs(cfg: ClusterSettings) -> dict[str, Any]:
    """Keyword arguments shared by the sync and async clients."""
    kwargs: dict[str, Any] = {
        "hosts": cfg.hosts,
        "request_timeout": cfg.request_timeout,
        "max_retries": cfg.max_retries,
        "retry_on_status": RETRY_STATUSES,
        "retry_on_timeout": True,
    }
    if cfg.api_key is not None:
        kwargs["api_key"] = cfg.api_key.get_secret_value()
    elif cfg.username is not None:
        password = cfg.password.get_secret_value() if cfg.password else ""
        kwargs["basic_auth"] = (cfg.username, password)
    # TLS options only for https URLs (the client refuses them for http, e.g. a CA exported for another node)
    tls = any(h.startswith("https://") for h in cfg.hosts)
    if cfg.ca_certs is not None and tls:
        kwargs["ca_certs"] = str(cfg.ca_certs)
    if not cfg.verify_certs and tls:
        kwargs["verify_certs"] = False
    return kwargs


def make_client(cfg: ClusterSettings) -> Elasticsearch:
    """A synchronous client for ``cfg``. Builds no connection yet; raises nothing."""
    return Elasticsearch(**client_kwargs(cfg))


def make_async_client(cfg: ClusterSettings) -> AsyncElasticsearch:
    """An asyncio client for ``cfg``."""
    return AsyncElasticsearch(**client_kwargs(cfg))


def translate(exc: Exception, what: str = "request") -> HybridSearchError:
    """Map an ``elasticsearch`` exception to our error tree."""
    if isinstance(exc, HybridSearchError):
        return exc
    if isinstance(exc, elasticsearch.ConnectionError | elasticsearch.ConnectionTimeout):
        return ClusterUnavailable(f"Elasticsearch did not answer the {what}: {exc}. "
                                  "Is a node running? Start one with `ops/es-local.sh start` "
                                  "or set HSP_ES_URL.")
    if isinstance(exc, elasticsearch.NotFoundError):
        return IndexNotFound(f"{what} failed: not found ({_reason(exc)})")
    if isinstance(exc, elasticsearch.ApiError):
        return ClusterError(f"{what} failed with HTTP {exc.meta.status}: {_reason(exc)}")
    if isinstance(exc, elasticsearch.TransportError):
        return ClusterUnavailable(f"{what} failed in transport: {exc}")
    return ClusterError(f"{what} failed: {exc!r}")


def _reason(exc: elasticsearch.ApiError) -> str:
    body = exc.body if isinstance(exc.body, dict) else {}
    err = body.get("error")
    if isinstance(err, dict):
        root = (err.get("root_cause") or [err])[0]
        return f"{root.get('type')}: {root.get('reason')}"
    return str(err or exc.message)


@contextmanager
def es_errors(what: str = "request") -> Iterator[None]:
    """Context manager that re-raises ``elasticsearch`` errors as hybridsearch errors."""
    try:
        yield
    except (elasticsearch.ApiError, elasticsearch.TransportError) as exc:
        raise translate(exc, what) from exc


def cluster_info(es: Elasticsearch) -> dict[str, Any]:
    """Health and version via ``_cluster/health`` and ``_nodes`` (the zip has no ``GET /``)."""
    with es_errors("cluster health"):
        health = es.cluster.health().body
        nodes = es.nodes.info(filter_path="nodes.*.version").body
    versions = sorted({n["version"] for n in nodes.get("nodes", {}).values()})
    return {"cluster_name": health["cluster_name"], "status": health["status"],
            "number_of_nodes": health["number_of_nodes"], "versions": versions}
