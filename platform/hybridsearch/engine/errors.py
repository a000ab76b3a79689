"""Both client libraries' exceptions, read as data and translated into :mod:`hybridsearch.errors`.

``engine_errors(what)`` wraps calls so that ``elasticsearch`` and ``opensearchpy`` exceptions come out as
our types: 401 as AuthenticationFailed, 403 as AccessDenied (naming the action and what the engine said; a
block answered with 403 is read as IndexBlocked by :func:`hybridsearch.index.access.translate_write`),
404 as IndexNotFound, a TLS handshake that cannot succeed as TlsFailure (SchemeMismatch when the URL's scheme is
not what the node speaks, raised by the nodes of :mod:`hybridsearch.engine.connect`), no answer as
ClusterUnavailable.
Code that must look at an answer before translating it (an index that already exists, a security API the
engine lacks) catches :data:`API_ERRORS` and reads :func:`status_of` and :func:`error_type_of`.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import elasticsearch
import opensearchpy
from elastic_transport import TlsError

from hybridsearch.errors import (
    AccessDenied,
    AuthenticationFailed,
    ClusterError,
    ClusterUnavailable,
    HybridSearchError,
    IndexNotFound,
    TlsFailure,
)

#: every exception either client raises for a request that failed (answered or not)
API_ERRORS: tuple[type[Exception], ...] = (elasticsearch.ApiError, elasticsearch.TransportError,
                                            opensearchpy.TransportError)
#: the request got no answer (connection refused or reset, timeout)
UNREACHABLE: tuple[type[Exception], ...] = (elasticsearch.ConnectionError, elasticsearch.ConnectionTimeout,
                                            elasticsearch.TransportError, opensearchpy.ConnectionError)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an engine's error answer, None when there was no answer."""
    if isinstance(exc, elasticsearch.ApiError):
        return int(exc.meta.status)
    if isinstance(exc, opensearchpy.TransportError) and isinstance(exc.status_code, int):
        return exc.status_code
    return None


def body_of(exc: BaseException) -> dict[str, Any]:
    """The JSON body of an engine's error answer (``{}`` when there is none)."""
    if isinstance(exc, elasticsearch.ApiError):
        return exc.body if isinstance(exc.body, dict) else {}
    if isinstance(exc, opensearchpy.TransportError):
        return exc.info if isinstance(exc.info, dict) else {}
    return {}


def error_type_of(exc: BaseException) -> str | None:
    """The engine's error type (``resource_already_exists_exception``...), None when it gave none."""
    err = body_of(exc).get("error")
    return err.get("type") if isinstance(err, dict) else None


def reason_of(exc: BaseException) -> str:
    """``<type>: <reason>`` of the root cause the engine named, else the exception's own text."""
    err = body_of(exc).get("error")
    if isinstance(err, dict):
        root = (err.get("root_cause") or [err])[0]
        return f"{root.get('type')}: {root.get('reason')}"
    return str(err or getattr(exc, "message", None) or exc)


# ------------------------------------------------------------------------------------------ TLS

# OpenSSL reasons of handshakes that fail the same way on every try (not a TLS port, no shared protocol).
_HOPELESS_TLS = frozenset({"WRONG_VERSION_NUMBER", "HTTP_REQUEST", "UNSUPPORTED_PROTOCOL",
                           "TLSV1_ALERT_PROTOCOL_VERSION"})


def causes_of(exc: BaseException) -> Iterator[BaseException]:
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
    for e in causes_of(exc):
        if isinstance(e, ssl.SSLCertVerificationError) and getattr(e, "verify_message", None) is not None:
            return TlsFailure(url, f"certificate verify failed: {e.verify_message}", untrusted=True)
    for e in causes_of(exc):  # aiohttp's wrapper is an SSLCertVerificationError without the details
        if isinstance(e, ssl.SSLCertVerificationError):
            return TlsFailure(url, "certificate verify failed", untrusted=True)
    for e in causes_of(exc):
        if isinstance(e, ssl.SSLError) and e.reason in _HOPELESS_TLS:
            return TlsFailure(url, e.reason.lower().replace("_", " "), untrusted=False)
    return None


# ------------------------------------------------------------------------------------------ translation

#: the fix of every ClusterUnavailable that is not a TLS failure: no node answered
START_NODE = ("Is a node running? Start one with `ops/es-local.sh start` (or `docker compose up -d elasticsearch`), "
              "or point HSP_ES_URL at one")


def translate(exc: Exception, what: str = "request") -> HybridSearchError:
    """Map either client's exception to our error tree."""
    if isinstance(exc, HybridSearchError):
        return exc
    if isinstance(exc, TlsError | opensearchpy.SSLError):
        # the nodes raise the hopeless ones as TlsFailure already; this catches clients built elsewhere
        return tls_failure(exc, "the node") or ClusterUnavailable(
            f"TLS error on the {what}: {exc}", fix="Check HSP_ES__CA_CERTS and HSP_ES__VERIFY_CERTS")
    status = status_of(exc)
    if status is None and isinstance(exc, UNREACHABLE):
        return ClusterUnavailable(f"the cluster did not answer the {what}: {exc}", fix=START_NODE)
    if status == 401:
        return AuthenticationFailed(what, reason_of(exc) if body_of(exc) else None)
    if status == 403:
        return access_denied(what, reason_of(exc) if body_of(exc) else None)
    if status == 404:
        return IndexNotFound(f"{what} failed: not found ({reason_of(exc)})")
    if status is not None:
        return ClusterError(f"{what} failed with HTTP {status}: {reason_of(exc)}")
    if isinstance(exc, API_ERRORS):
        return ClusterUnavailable(f"{what} failed in transport: {exc}", fix=START_NODE)
    return ClusterError(f"{what} failed: {exc!r}")


_ES_ACTION = re.compile(r"\baction \[([^\]]+)\]")
_ES_INDICES = re.compile(r"\bon indices \[([^\]]*)\]")
_ES_PRIVILEGES = re.compile(r"\bprivileges \[([^\]]*)\]")


def access_denied(what: str, reason: str | None) -> AccessDenied:
    """AccessDenied for ``what``, with the action, indices and privileges the engine named in ``reason``."""
    text = reason or ""
    action, indices, privileges = (p.search(text) for p in (_ES_ACTION, _ES_INDICES, _ES_PRIVILEGES))
    return AccessDenied(what, es_action=action.group(1) if action else None,
                        resource=indices.group(1) if indices else None,
                        privileges=tuple(p.strip() for p in privileges.group(1).split(",") if p.strip())
                        if privileges else (), reason=reason)


@contextmanager
def engine_errors(what: str = "request") -> Iterator[None]:
    """Context manager that re-raises either client's errors as hybridsearch errors."""
    try:
        yield
    except API_ERRORS as exc:
        raise translate(exc, what) from exc
