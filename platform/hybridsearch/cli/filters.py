"""``hsp search --filter`` expressions (``field=value``, ``field!=value``, ``field>=x``, ``field?``) read into
typed filters (:mod:`hybridsearch.query.filters`)."""

from __future__ import annotations

import re

from hybridsearch.errors import QueryError
from hybridsearch.index.metadata import Scalar
from hybridsearch.query.filters import NUMERIC_FIELDS, AllOf, Exists, Filter, NoneOf, Range, Term, check_field

_CLI_FIELD = r"[A-Za-z0-9_.@$-]+"
_CLI_EXISTS = re.compile(rf"^\s*(?P<field>{_CLI_FIELD})\s*\?\s*$")
_CLI = re.compile(rf"^\s*(?P<field>{_CLI_FIELD})\s*(?P<op>>=|<=|!=|=|>|<)(?P<value>.*)$", re.DOTALL)
_CLI_RANGE = {">=": "gte", ">": "gt", "<=": "lte", "<": "lt"}
_CLI_FORMS = ('write field=value, field!=value, field>=x (>, <=, <) or field?; quote a value to keep spaces, '
              'quotes or a trailing ? as written: field="What is this?"')


def _cli_unquote(expr: str, raw: str) -> str:
    """The value of a ``--filter``: unquoted, as written less the spaces around it; in double or single quotes,
    what is between them, a backslash taking the next character as it is (``\\"``, ``\\\\``)."""
    text = raw.strip()
    if not text or text[0] not in "\"'":
        if not text:
            raise QueryError(f"invalid filter {expr!r}: no value; {_CLI_FORMS} (the empty string: field=\"\")")
        return text
    quote, out, i = text[0], [], 1
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text):
            out.append(text[i + 1])
            i += 2
            continue
        if c == quote:
            if i != len(text) - 1:
                raise QueryError(f"invalid filter {expr!r}: text after the closing {quote}; escape a quote inside "
                                 f"the value as \\{quote}")
            return "".join(out)
        out.append(c)
        i += 1
    raise QueryError(f"invalid filter {expr!r}: the value opens a {quote} quote that does not close")


def _cli_value(field: str, raw: str) -> Scalar:
    if field in NUMERIC_FIELDS:
        try:
            return int(raw)
        except ValueError:
            try:
                return float(raw)
            except ValueError:
                raise QueryError(f"invalid filter: {field} needs a number, got {raw!r}") from None
    return raw


def parse_cli_filters(exprs: list[str]) -> Filter | None:
    """The filter all of ``exprs`` (``--filter`` arguments, forms in the module docstring) make, None for none; two
    bounds on one field make one range; a value in quotes is taken exactly, a backslash escaping the next character
    (``title.raw="What is this?"``). Raises QueryError."""
    parts: list[Filter] = []
    ranges: dict[str, dict[str, Scalar]] = {}
    for expr in exprs:
        if (exists := _CLI_EXISTS.match(expr)) is not None:
            parts.append(Exists(check_field(exists["field"])))
            continue
        m = _CLI.match(expr)
        if m is None:
            raise QueryError(f"invalid filter {expr!r}: {_CLI_FORMS}")
        field, op = check_field(m["field"]), m["op"]
        value = _cli_value(field, _cli_unquote(expr, m["value"]))
        if op == "=":
            parts.append(Term(field, value))
        elif op == "!=":
            parts.append(NoneOf(filters=[Term(field, value)]))
        else:
            if _CLI_RANGE[op] in ranges.get(field, {}):
                raise QueryError(f"invalid filter {expr!r}: {field} has two {op} bounds; give one")
            ranges.setdefault(field, {})[_CLI_RANGE[op]] = value
    parts.extend(Range(field, **bounds) for field, bounds in ranges.items())  # type: ignore[arg-type]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else AllOf(filters=parts)
