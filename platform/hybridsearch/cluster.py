"""The one place that builds Elasticsearch clients and translates their exceptions.

``make_client`` / ``make_async_client`` build clients from :class:`ClusterSettings` (auth, TLS,
timeouts, retries on 429/502/503/504 and on connection errors). ``es_errors()`` wraps calls so
that ``elasticsearch`` exceptions come out as :mod:`hybridsearch.errors` types: 401 as
AuthenticationFailed, 403 as AccessDenied (naming the action and what Elasticsearch said), a
TLS handshake that cannot succeed as TlsFailure. The clients' nodes raise TlsFailure themselves
for an untrusted certificate or a non-TLS port, so the transport does not retry what cannot work.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import elasticsearch
from elastic_transport import AiohttpHttpNode, TlsError, Urllib3HttpNode
from elasticsearch import AsyncElasticsearch, Elasticsearch

from hybridsearch.errors import (
    AccessDenied,
    AuthenticationFailed,
    ClusterError,
    ClusterUnavailable,
    HybridSearchError,
    IndexNotFound,
    TlsFailure,
)
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


# ------------------------------------------------------------------------------------------ TLS

# OpenSSL reasons of handshakes that fail the same way on every try (not a TLS port, no shared protocol).
_HOPELESS_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNSUPPORTED_PROTOCOL",
                           "TLSV1_ALERT_PROTOCOL_VERSION"})


def _ssl_causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and everything it wraps: ``errors``, ``__cause__``, ``__context__``, exception ``args``."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        todo.extend(x for x in (*getattr(e, "errors", ()), e.__cause__, e.__context__, *e.args,
                                getattr(e, "certificate_error", None)) if isinstance(x, BaseException))


def tls_failure(exc: BaseException, url: str) -> TlsFailure | None:
    """A TlsFailure when ``exc`` is a TLS handshake failure that retrying cannot fix, else None."""
    for e in _ssl_causes(exc):
        if isinstance(e, ssl.SSLCertVerificationError) and getattr(e, "verify_message", None) is not None:
            return TlsFailure(url, f"certificate verify failed: {e.verify_message}", untrusted=True)
    for e in _ssl_causes(exc):  # aiohttp's wrapper is an SSLCertVerificationError without the details
        if isinstance(e, ssl.SSLCertVerificationError):
            return TlsFailure(url, "certificate verify failed", untrusted=True)
    for e in _ssl_causes(exc):
        if isinstance(e, ssl.SSLError) and e.reason in _HOPELESS_TLS:
            return TlsFailure(url, e.reason.lower().replace("_", " "), untrusted=False)
    return None


class _Node(Urllib3HttpNode):
    """The default sync node, except that a hopeless TLS failure raises TlsFailure (not retried)."""

    def perform_request(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().perform_request(*args, **kwargs)
        except TlsError as exc:
            raise (tls_failure(exc, self.base_url) or exc) from exc


class _AsyncNode(AiohttpHttpNode):
    """The default asyncio node, with the same TLS rule as :class:`_Node`."""

    async def perform_request(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]  # as the base
        try:
            return await super().perform_request(*args, **kwargs)
        except TlsError as exc:
            raise (tls_failure(exc, self.base_url) or exc) from exc


def make_client(cfg: ClusterSettings, *, max_retries: int | None = None,
                request_timeout: float | None = None) -> Elasticsearch:
    """A synchronous client for ``cfg`` (``max_retries`` and ``request_timeout`` override its values: the
    doctor wants a quick answer). Builds no connection yet; raises nothing."""
    kwargs = client_kwargs(cfg)
    if max_retries is not None:
        kwargs["max_retries"] = max_retries
    if request_timeout is not None:
        kwargs["request_timeout"] = request_timeout
    return Elasticsearch(**kwargs, node_class=_Node)


def make_async_client(cfg: ClusterSettings) -> AsyncElasticsearch:
    """An asyncio client for ``cfg``."""
    return AsyncElasticsearch(**client_kwargs(cfg), node_class=_AsyncNode)


# ------------------------------------------------------------------------------------------ errors


def translate(exc: Exception, what: str = "request") -> HybridSearchError:
    """Map an ``elasticsearch`` exception to our error tree."""
    if isinstance(exc, HybridSearchError):
        return exc
    if isinstance(exc, TlsError):
        # the nodes raise the hopeless ones as TlsFailure already; this catches clients built elsewhere
        return tls_failure(exc, "the node") or ClusterUnavailable(
            f"TLS error on the {what}: {exc.message}. Check HSP_ES__CA_CERTS and HSP_ES__VERIFY_CERTS")
    if isinstance(exc, elasticsearch.ConnectionError | elasticsearch.ConnectionTimeout):
        return ClusterUnavailable(f"Elasticsearch did not answer the {what}: {exc}",
                                  fix="Is a node running? Start one with `ops/es-local.sh start` "
                                  "or set HSP_ES_URL.")
    if isinstance(exc, elasticsearch.ApiError) and exc.meta.status == 401:
        return AuthenticationFailed(what, _reason(exc) if exc.body else None)
    if isinstance(exc, elasticsearch.ApiError) and exc.meta.status == 403:
        return access_denied(what, _reason(exc) if exc.body else None)
    if isinstance(exc, elasticsearch.NotFoundError):
        return IndexNotFound(f"{what} failed: not found ({_reason(exc)})")
    if isinstance(exc, elasticsearch.ApiError):
        return ClusterError(f"{what} failed with HTTP {exc.meta.status}: {_reason(exc)}")
    if isinstance(exc, elasticsearch.TransportError):
        return ClusterUnavailable(f"{what} failed in transport: {exc}")
    return ClusterError(f"{what} failed: {exc!r}")


_ES_ACTION = re.compile(r"\baction \[([^\]]+)\]")
_ES_INDICES = re.compile(r"\bon indices \[([^\]]*)\]")
_ES_PRIVILEGES = re.compile(r"\bprivileges \[([^\]]*)\]")


def access_denied(what: str, reason: str | None) -> AccessDenied:
    """AccessDenied for ``what``, with the action, indices and privileges Elasticsearch named in ``reason``."""
    text = reason or ""
    action, indices, privileges = (p.search(text) for p in (_ES_ACTION, _ES_INDICES, _ES_PRIVILEGES))
    return AccessDenied(what, es_action=action.group(1) if action else None,
                        resource=indices.group(1) if indices else None,
                        privileges=tuple(p.strip() for p in privileges.group(1).split(",") if p.strip())
                        if privileges else (), reason=reason)


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
