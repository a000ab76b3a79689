"""The client library's exceptions made (:func:`http_error`), read as data (:func:`status_of`,
:func:`error_type_of`) and translated into :mod:`hybridsearch.errors` (:func:`engine_errors`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import elasticsearch
from elastic_transport import ApiResponseMeta, TlsError

from hybridsearch.errors import AccessDenied, AuthenticationFailed, ClusterError, ClusterUnavailable, IndexNotFound

#: every exception a request that failed raises (answered or not)
API_ERRORS: tuple[type[Exception], ...] = (elasticsearch.ApiError, elasticsearch.TransportError)
#: the request got no answer (connection refused or reset, timeout)
UNREACHABLE: tuple[type[Exception], ...] = (elasticsearch.TransportError,)
START_NODE = ("Is a node running? Start one with `ops/es-local.sh start` (or `docker compose up -d elasticsearch`), "
              "or point HSP_ES_URL at one")


def http_error(meta: ApiResponseMeta, body: Any) -> elasticsearch.ApiError:
    """The ``elasticsearch`` library's error for an answer's status (``NotFoundError`` for 404...)."""
    error = body.get("error", body) if isinstance(body, dict) else body
    message = str(error.get("type", error) if isinstance(error, dict) else error)
    return elasticsearch.exceptions.HTTP_EXCEPTIONS.get(meta.status, elasticsearch.ApiError)(
        message=message, meta=meta, body=body)


def status_of(exc: BaseException) -> int | None:
    """The HTTP status of an engine's error answer, None when there was no answer."""
    return exc.meta.status if isinstance(exc, elasticsearch.ApiError) else None


def _body_of(exc: BaseException) -> dict[str, Any]:
    return exc.body if isinstance(exc, elasticsearch.ApiError) and isinstance(exc.body, dict) else {}


def error_type_of(exc: BaseException) -> str | None:
    """The engine's error type (``resource_already_exists_exception``...), None when it gave none."""
    err = _body_of(exc).get("error")
    return err.get("type") if isinstance(err, dict) else None


def reason_of(exc: BaseException) -> str:
    """``<type>: <reason>`` of the root cause the engine named, else the exception's own text."""
    err = _body_of(exc).get("error")
    if isinstance(err, dict):
        root = (err.get("root_cause") or [err])[0]
        return f"{root.get('type')}: {root.get('reason')}"
    return str(err or getattr(exc, "message", None) or exc)


def causes_of(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and everything it wraps: ``errors``, ``__cause__``, ``__context__``, exception ``args``."""
    seen: set[int] = set()
    todo: list[BaseException] = [exc]
    while todo:
        e = todo.pop()
        if id(e) not in seen:
            seen.add(id(e))
            yield e
            todo.extend(x for x in (*getattr(e, "errors", ()), e.__cause__, e.__context__, *e.args,
                                    getattr(e, "certificate_error", None)) if isinstance(x, BaseException))


def access_denied(what: str, reason: str | None) -> AccessDenied:
    """AccessDenied for ``what``, with the action, indices and privileges the engine named in ``reason``."""
    action, indices, privileges = (re.search(p, reason or "") for p in (
        r"\baction \[([^\]]+)\]", r"\bon indices \[([^\]]*)\]", r"\bprivileges \[([^\]]*)\]"))
    return AccessDenied(what, es_action=action.group(1) if action else None,
                        resource=indices.group(1) if indices else None,
                        privileges=tuple(p.strip() for p in privileges.group(1).split(",") if p.strip())
                        if privileges else (), reason=reason)


def translate(exc: Exception, what: str = "request") -> ClusterError:
    """One of :data:`API_ERRORS` as our error: 401 AuthenticationFailed, 403 AccessDenied, 404 IndexNotFound, no
    answer ClusterUnavailable, any other status ClusterError."""
    if isinstance(exc, TlsError):  # the nodes raise the hopeless ones as TlsFailure
        return ClusterUnavailable(f"TLS error on the {what}: {exc}",
                                  fix="Check HSP_ES__CA_CERTS and HSP_ES__VERIFY_CERTS")
    status, said = status_of(exc), reason_of(exc) if _body_of(exc) else None
    if status is None:
        return ClusterUnavailable(f"the cluster did not answer the {what}: {exc}", fix=START_NODE)
    if status in (401, 403):
        return AuthenticationFailed(what, said) if status == 401 else access_denied(what, said)
    if status == 404:
        return IndexNotFound(f"{what} failed: not found ({reason_of(exc)})")
    return ClusterError(f"{what} failed with HTTP {status}: {reason_of(exc)}")


@contextmanager
def engine_errors(what: str = "request") -> Iterator[None]:
    """Re-raise the client libraries' errors as hybridsearch errors."""
    try:
        yield
    except API_ERRORS as exc:
        raise translate(exc, what) from exc
