"""How ``hsp`` writes to the terminal. One rule: text is text, never markup.

Output fits the width it is printed at: rich measures the terminal (``COLUMNS`` when set, 80 in a pipe or a
file), and every command lays its output out for that width. In a terminal a table gets a light rule under its
header and text gets colour (none with ``NO_COLOR`` set); in a pipe or a file rich writes no escape codes at all, and
:func:`table` draws no box-drawing characters.

Every console a command prints on comes from :func:`console`, which has rich markup, emoji codes
and highlighting turned off, so a ``[`` in an index name, a query, a document title or an error
message prints as itself (Elasticsearch's messages are full of ``[...]``). Style comes only from
:func:`styled`, which builds a :class:`rich.text.Text` from plain pieces and ``(piece, style)``
pairs — never from markup inside a string.

Errors are printed by :func:`print_error` only (called from ``cli/main.py``): ``error: <message>``,
at most :data:`MAX_ERROR_LINES` lines, and the chain of causes only with ``--verbose``.

Nothing printed carries a URL's credentials: error messages (and their causes) and every log line that
reaches a handler of the root logger pass through :func:`hybridsearch.cluster_url.redact_url`.
"""

from __future__ import annotations

import logging
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from hybridsearch.cluster_url import redact_url

#: A piece of :func:`styled` output: plain text, or (text, rich style).
Part = str | tuple[str, str]
#: Lines of an error message shown without ``--verbose``.
MAX_ERROR_LINES = 4
#: Loggers of the Elasticsearch client: their retry warnings (with tracebacks) only show with --verbose.
CLIENT_LOGGERS = ("elastic_transport", "elasticsearch", "opensearch")


def console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A console that prints strings as they are: no markup, no ``:emoji:`` codes, no highlighting."""
    return Console(stderr=stderr, width=width, markup=False, emoji=False, highlight=False)


def table(out: Console, *, title: str | None = None, **options: Any) -> Table:
    """A table for ``out``: a rule under the header in a terminal, plain columns without box-drawing characters in a
    pipe or a file. ``options`` are :class:`rich.table.Table`'s."""
    return Table(title=title, box=box.SIMPLE_HEAD if out.is_terminal else None, show_edge=False, header_style="bold",
                 **options)


def wrapped(out: Console, text: Text | str, indent: int = 0) -> list[Text]:
    """``text`` cut into lines of ``out``'s width at word boundaries, each led by ``indent`` spaces, none ending in a
    space (rich's own wrapping pads lines to the width)."""
    lines = (Text(text) if isinstance(text, str) else text).wrap(out, max(out.width - indent, 20))
    return [Text(" " * indent) + line.copy() for line in lines]


def print_wrapped(out: Console, text: Text | str, indent: int = 0) -> None:
    """Print :func:`wrapped` ``text``, a line at a time."""
    for line in wrapped(out, text, indent):
        line.rstrip()
        out.print(line, no_wrap=True, overflow="ellipsis")


def styled(*parts: Part) -> Text:
    """Text from plain pieces and ``(piece, style)`` pairs; no piece is ever read as markup."""
    return Text.assemble(*parts)


def error_text(exc: BaseException, verbose: int = 0) -> Text:
    """``error: <message>``: at most MAX_ERROR_LINES lines, plus the causes when ``verbose``."""
    lines = redact_url(str(exc) or type(exc).__name__).splitlines() or [type(exc).__name__]
    if not verbose and len(lines) > MAX_ERROR_LINES:
        lines = [*lines[:MAX_ERROR_LINES], f"… {len(lines) - MAX_ERROR_LINES} more line(s) with --verbose"]
    text = styled(("error: ", "bold red"), "\n".join(lines))
    if verbose:
        seen = {id(exc)}
        cause = exc.__cause__ or exc.__context__
        while cause is not None and id(cause) not in seen:
            seen.add(id(cause))
            text.append(f"\n  caused by {type(cause).__module__}.{type(cause).__qualname__}: "
                        f"{redact_url(str(cause))}", style="dim")
            cause = cause.__cause__ or cause.__context__
    return text


def print_error(out: Console, exc: BaseException, verbose: int = 0) -> None:
    """Print ``exc`` for people on ``out`` (see :func:`error_text`), without hard line breaks."""
    out.print(error_text(exc, verbose), soft_wrap=True)


def quiet_client_logs(verbose: int) -> None:
    """Hide the Elasticsearch client's retry warnings unless ``verbose``: our error says what failed. Every
    handler of the root logger gets :class:`RedactingFilter` too (``hsp`` calls this once its logging is set)."""
    for name in CLIENT_LOGGERS:
        logging.getLogger(name).setLevel(logging.NOTSET if verbose else logging.ERROR)
    redact_logs()


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (and its traceback text) with URL credentials cut out."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = redact_url(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_url(record.exc_text)
        return True


def redact_logs(logger: logging.Logger | None = None) -> None:
    """Put a :class:`RedactingFilter` on every handler of ``logger`` (the root logger by default), once."""
    for handler in (logger or logging.getLogger()).handlers:
        if not any(isinstance(f, RedactingFilter) for f in handler.filters):
            handler.addFilter(RedactingFilter())
