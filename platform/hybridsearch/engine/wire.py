"""Requests and answers in the one form every engine's library accepts: a request body from keyword fields
(:func:`request_body`), query-string parameters as each library takes them (:func:`query_params`), and the plain
JSON of a response (:func:`plain`)."""

from __future__ import annotations

from typing import Any

Json = dict[str, Any]


def plain(resp: Any) -> Any:
    """The JSON of a response: ``elasticsearch`` wraps it (``.body``), ``opensearchpy`` does not."""
    return resp.body if hasattr(resp, "body") else resp


def request_body(**fields: Any) -> Json:
    """A request body from keyword fields, None values dropped; ``source`` is ``_source``."""
    return {("_source" if k == "source" else k): v for k, v in fields.items() if v is not None}


def query_params(kind: str, **params: Any) -> dict[str, Any]:
    """Query-string parameters as the library takes them: keywords for ``elasticsearch``, one ``params`` dict
    for ``opensearchpy`` (whose keywords ``timeout`` and ``request_timeout`` mean the HTTP timeout)."""
    given = {k: (str(v).lower() if isinstance(v, bool) else v) for k, v in params.items() if v is not None}
    if kind == "opensearch":
        return {"params": given} if given else {}
    return given
