"""How ``hsp`` writes to the terminal: plain text (never markup; style only from :func:`styled`) that fits the width
rich measures (``COLUMNS``, 80 in a pipe), progress bars, errors. A pipe or a file gets no escape codes and no box
drawing, and a table too wide prints as ``header: value`` lines. No output carries a URL's credentials."""

from __future__ import annotations

import logging
import threading
from typing import Any

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Column, Table
from rich.text import Text

from hybridsearch.cluster_url import redact_url
from hybridsearch.progress import ProgressEvent

#: A piece of :func:`styled` output: plain text, or (text, rich style).
Part = str | tuple[str, str]
#: Lines of an error message shown without ``--verbose``.
MAX_ERROR_LINES = 4


def console(*, stderr: bool = False, width: int | None = None) -> Console:
    """A console that prints strings as they are: no markup, no ``:emoji:`` codes, no highlighting."""
    return Console(stderr=stderr, width=width, markup=False, emoji=False, highlight=False)


#: standard output, shared by the commands
stdout = console()


def table(out: Console, *columns: str | Column, title: str | None = None, **options: Any) -> Table:
    """A :class:`rich.table.Table` for ``out``: a rule under the header in a terminal, no box drawing in a pipe."""
    return Table(*columns, title=title, box=box.SIMPLE_HEAD if out.is_terminal else None, show_edge=False,
                 header_style="bold", **options)


def right(*headers: str) -> list[Column]:
    """Right-justified columns, for numbers."""
    return [Column(header, justify="right") for header in headers]


def print_table(out: Console, grid: Table) -> None:
    """``grid`` as a table when its columns fit ``out`` unwrapped, else each row as indented ``header: value`` lines."""
    def natural(*cells: Any) -> int:
        return max(Measurement.get(out, out.options, cell).maximum for cell in cells) + 2

    if sum(natural(col.header, *col.cells) for col in grid.columns) <= out.width:
        out.print(grid)
        return
    if grid.title:
        print_wrapped(out, styled((str(grid.title), "bold")))
    for row in zip(*(col.cells for col in grid.columns), strict=True):
        shown = [(str(col.header), cell if isinstance(cell, Text) else Text(str(cell)))
                 for col, cell in zip(grid.columns, row, strict=True)]
        lines = [styled(f"{header}: " if header else "") + Text(", ").join(value.split("\n"))
                 for header, value in shown if value.plain.strip()]
        for i, line in enumerate(lines):
            print_wrapped(out, line, indent=2 if i else 0)


def wrapped(out: Console, text: Text | str, indent: int = 0) -> list[Text]:
    """``text`` cut at words into lines of ``out``'s width led by ``indent`` spaces (rich's wrapping pads them)."""
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


def print_error(out: Console, exc: BaseException, verbose: int = 0) -> None:
    """``error: <message>`` on ``out``: at most MAX_ERROR_LINES lines, plus the causes when ``verbose``."""
    lines = redact_url(str(exc) or type(exc).__name__).splitlines() or [type(exc).__name__]
    if not verbose and len(lines) > MAX_ERROR_LINES:
        lines = [*lines[:MAX_ERROR_LINES], f"… {len(lines) - MAX_ERROR_LINES} more line(s) with --verbose"]
    text = styled(("error: ", "bold red"), "\n".join(lines))
    seen = {id(exc)}
    cause = (exc.__cause__ or exc.__context__) if verbose else None
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        text.append(f"\n  caused by {type(cause).__module__}.{type(cause).__qualname__}: {redact_url(str(cause))}",
                    style="dim")
        cause = cause.__cause__ or cause.__context__
    out.print(text, soft_wrap=True)


def redact(record: logging.LogRecord) -> bool:
    """A log filter: cuts URL credentials out of ``record``'s message and traceback text."""
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
    """Put :func:`redact` on every handler of ``logger`` (the root logger by default), once."""
    for handler in (logger or logging.getLogger()).handlers:
        if redact not in handler.filters:
            handler.addFilter(redact)


class RichProgress(Progress):
    """A :data:`~hybridsearch.progress.ProgressSink` for any thread: a bar or spinner per task, notes printed above."""

    def __init__(self, out: Console | None = None, *, enabled: bool = True, keep_finished: bool = True,
                 width: int = 14) -> None:
        out = out or console(stderr=True)
        # the name is never cut, the description wraps in its column; a pipe or a file gets no spinner and no bar
        name = TextColumn(f"{{task.fields[name]:>{width}}}", table_column=Column(no_wrap=True))
        text: list[Any] = [MofNCompleteColumn(), TimeElapsedColumn(),
                           TextColumn("{task.description}", table_column=Column(ratio=1))]
        columns = ([SpinnerColumn(), name, BarColumn(bar_width=40 if out.width >= 120 else 10), *text]
                   if out.is_terminal else [name, *text])
        super().__init__(*columns, console=out, disable=not enabled, expand=True)
        self.keep_finished = keep_finished
        self.by_name: dict[str, Any] = {}
        self.events_lock = threading.Lock()

    def __enter__(self) -> RichProgress:
        self.start()
        return self

    def __call__(self, event: ProgressEvent) -> None:
        if self.disable:
            return
        with self.events_lock:
            if event.note is not None:
                self.console.print(event.note)
                return
            if event.task not in self.by_name:
                self.by_name[event.task] = self.add_task(event.detail, total=event.total, name=event.task)
            task = self.by_name[event.task]
            self.update(task, completed=event.done, total=event.total, description=event.detail)
            if event.finished and not self.keep_finished:
                self.remove_task(task)
                del self.by_name[event.task]
