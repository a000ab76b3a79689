"""The fields search filters may name and their types.

**Values are checked against the field's type** (:data:`FIELD_TYPES`; ``metadata.<key>`` by the index's typed
metadata, below): ``position`` takes whole numbers, ``ingested_at`` ISO 8601 dates, ``date``/``datetime`` or date
math (never booleans or numbers), keyword fields strings; a range whose lower bound lies above its upper bound (or
meets it with an exclusive bound) matches nothing and is refused too. The conversion of a value to a field's type is
:func:`hybridsearch.index.metadata.typed_value`, the one ingestion writes typed metadata with.

**Metadata.** ``metadata`` is free-form (``flattened`` / ``flat_object``): every value is indexed as text, so
``metadata.<key>`` takes term, terms and exists filters, and a range on it is refused (text compares 25 after
100). Keys declared in ``HSP_INDEX__METADATA_FIELDS`` are also indexed as ``meta.<key>`` of their type
(:mod:`hybridsearch.index.metadata`); given the index's declared keys (``metadata=``), term, terms and range filters
on ``metadata.<key>`` go to that typed field, values checked against the type. A range on a key the index does not
type is refused with the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

from hybridsearch.errors import QueryError
from hybridsearch.index.metadata import TYPED_METADATA, MetadataFields

#: Keyword, date and number fields of the chunk mapping that filters may name, with their types.
FIELD_TYPES: dict[str, str] = {
    "doc_id": "keyword", "chunk_id": "keyword", "parent_id": "keyword", "source": "keyword",
    "content_hash": "keyword", "tenant": "keyword", "ingested_at": "date", "position": "integer",
    "title.raw": "keyword",
}
ALLOWED_FIELDS = frozenset(FIELD_TYPES)
NUMERIC_FIELDS = frozenset(f for f, t in FIELD_TYPES.items() if t == "integer")
DATE_FIELDS = frozenset(f for f, t in FIELD_TYPES.items() if t == "date")
_METADATA_KEY = re.compile(r"^metadata\.[A-Za-z0-9_@$-][A-Za-z0-9_.@$-]{0,200}$")
#: what free-form metadata is to the checks: every value indexed as text
FREE_FORM = "free-form"
#: a metadata key whose type is not known yet (the index is not checked): no conversion, no refusal
UNCHECKED = "unchecked"
#: ``metadata=`` for a check before the index is known: every metadata key is :data:`UNCHECKED`
NOT_YET_KNOWN: Mapping[str, str] = MappingProxyType({})


def check_field(field: str) -> str:
    """``field`` when filters may name it; raises QueryError naming the allowed fields otherwise."""
    if field in ALLOWED_FIELDS or _METADATA_KEY.match(field):
        return field
    allowed = ", ".join(sorted(ALLOWED_FIELDS))
    raise QueryError(f"cannot filter on unknown field {field!r}: use one of {allowed}, or metadata.<key>")


def field_type(field: str, metadata: MetadataFields | None = None) -> tuple[str, str]:
    """``(field the DSL names, its type)`` for a filter's ``field``: a fixed field (:data:`FIELD_TYPES`), a
    declared metadata key (``meta.<key>`` and its type) or free-form metadata (``metadata.<key>``,
    :data:`FREE_FORM`)."""
    if field in FIELD_TYPES:
        return field, FIELD_TYPES[field]
    key = field.removeprefix("metadata.")
    if metadata is NOT_YET_KNOWN:
        return field, UNCHECKED
    if metadata and key in metadata:
        return f"{TYPED_METADATA}.{key}", metadata[key]
    return field, FREE_FORM

def free_form_range(field: str) -> str:
    """Why a range on free-form ``field`` is refused, and the fix."""
    key = field.removeprefix("metadata.")
    example = '{"' + key + '": "long"}'
    return (f"range on {field}: this index has no typed field for it, and free-form metadata compares values as text "
            f"(25 sorts after 100); declare it, e.g. HSP_INDEX__METADATA_FIELDS='{example}' (long, double, date, "
            "keyword or boolean), and ingest into a new index version")
