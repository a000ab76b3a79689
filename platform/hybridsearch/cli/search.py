"""``hsp search``: hybrid search from the shell: one block per hit (or a table, or JSON), per-hit explanations or
``--why DOC_ID``.

Examples::

    hsp search "does vitamin d prevent fractures" --k 5
    hsp search "statins" --mode bm25 --filter source=pubmed --filter "ingested_at>=2024-01-01" --json
    hsp search "tau protein" --explain --no-rerank
    hsp search "tau protein" --why 4983
    hsp search "tau protein" --format table           # the table, for a wide terminal

A block is the hit's rank, title and id, its rank and score in each stage, and a snippet in two lines cut to the
terminal's width (80 columns in a pipe, written as plain text); the demo prints the same blocks.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from contextlib import suppress
from typing import get_args

from rich.console import Console
from rich.table import Column
from rich.text import Text

from hybridsearch.cli import AddCommand
from hybridsearch.cli.output import console, print_wrapped, right, styled, table, wrapped
from hybridsearch.errors import QueryError
from hybridsearch.index.metadata import Scalar
from hybridsearch.query.filters import NUMERIC_FIELDS, AllOf, Exists, Filter, NoneOf, Range, Term, check_field
from hybridsearch.query.results import Highlight, Hit, Mode, RerankOutcome, SearchResult, StageScore, WhyReport
from hybridsearch.settings import Settings

SNIPPET_CHARS = 180  # the table's snippet
HIGHLIGHT = "bold yellow"
SNIPPET_LINES = 2  # under each hit's title, indented by INDENT
INDENT = 4
TITLE_CHARS = 120  # the longest title the table prints
_FIELD = r"[A-Za-z0-9_.@$-]+"
_EXISTS = re.compile(rf"^\s*(?P<field>{_FIELD})\s*\?\s*$")
_FILTER = re.compile(rf"^\s*(?P<field>{_FIELD})\s*(?P<op>>=|<=|!=|=|>|<)(?P<value>.*)$", re.DOTALL)
_QUOTED = re.compile(r"""(["'])((?:\\.|(?!\1)[^\\])*)\1""", re.DOTALL)  # a backslash takes the next character
_RANGE_OPS = {">=": "gte", ">": "gt", "<=": "lte", "<": "lt"}
_FILTER_FORMS = ('write field=value, field!=value, field>=x (>, <=, <) or field?; quote a value to keep spaces, '
              'quotes or a trailing ? as written: field="What is this?"')


def register(add: AddCommand) -> None:
    p = add("search", run, help="search the index (BM25 + kNN, fused, reranked)", description=__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("query", help="the query text")
    p.add_argument("--mode", choices=get_args(Mode), default="hybrid", help="which lists to search (default hybrid)")
    p.add_argument("--k", type=int, default=10, help="hits per page (default 10, at most HSP_QUERY__MAX_K)")
    p.add_argument("--page", type=int, default=1, help="page of k hits over the fused window (default 1)")
    p.add_argument("--filter", dest="filters", action="append", default=[], metavar="EXPR",
                   help="field=value, field!=value, field>=x (>, <=, <) or field? ; repeat to AND them. Quote a "
                        "value to take it exactly (spaces, quotes, a trailing ?): 'title.raw=\"What is this?\"'; "
                        "inside quotes a backslash escapes the next character. Fields: doc_id chunk_id parent_id "
                        "source content_hash tenant ingested_at position title.raw metadata.<key> (ranges only on "
                        "keys typed by HSP_INDEX__METADATA_FIELDS)")
    p.add_argument("--no-rerank", dest="rerank", action="store_false", help="keep the fused order")
    p.add_argument("--format", choices=("blocks", "table", "json"), default="blocks",
                   help="blocks (default: one block per hit, fits the terminal or 80 columns in a pipe), table, "
                        "or json")
    p.add_argument("--json", dest="format", action="store_const", const="json", help="the same as --format json")
    p.add_argument("--explain", action="store_true", help="say why each hit is where it is")
    p.add_argument("--why", metavar="DOC_ID", help="show where DOC_ID fell in BM25, kNN, fusion and rerank")


def run(args: argparse.Namespace, settings: Settings) -> int:
    """Run one search (or ``--why``) and print it, each check before any costlier step. Raises QueryError,
    ClusterError, ModelError."""
    from hybridsearch.query.build import plan
    from hybridsearch.query.client import SearchClient

    filters = parse_cli_filters(args.filters)
    checks = {"k": 1 if args.why else args.k, "mode": args.mode, "filters": filters, "rerank": args.rerank,
              "explain": args.explain, "page": 1 if args.why else args.page}
    plan(settings.query, settings.index.tenant, args.query, metadata=settings.index.metadata_fields, **checks)
    out = console()
    with SearchClient.from_settings(settings) as client:
        if not args.rerank:
            client.reranker = None  # not loaded when not wanted
        client.index()  # cluster, credentials, alias and mapping first: AuthenticationFailed, IndexNotFound, ...
        client.check(args.query, **checks)  # the filters against the index's typed metadata, before models load
        client.warm_up(args.mode)  # models load now, so the printed timings are the query's own
        result = (client.why(args.query, args.why, mode=args.mode, filters=filters, rerank=args.rerank) if args.why
                  else client.search(args.query, k=args.k, mode=args.mode, filters=filters, rerank=args.rerank,
                                     explain=args.explain, page=args.page, highlight=True))
    if args.format == "json":
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    elif isinstance(result, WhyReport):
        print_why(out, result)
    elif args.format == "table":
        print_hits_table(out, result)
    else:
        print_result(out, result)
    return 0


def _unquote(expr: str, raw: str) -> str:
    """A ``--filter`` value: as written less the spaces around it, or what is between its quotes, unescaped."""
    text = raw.strip()
    if not text:
        raise QueryError(f"invalid filter {expr!r}: no value; {_FILTER_FORMS} (the empty string: field=\"\")")
    if text[0] not in "\"'":
        return text
    quote, quoted = text[0], _QUOTED.match(text)
    if quoted is None:
        raise QueryError(f"invalid filter {expr!r}: the value opens a {quote} quote that does not close")
    if quoted.end() != len(text):
        raise QueryError(f"invalid filter {expr!r}: text after the closing {quote}; escape a quote inside "
                         f"the value as \\{quote}")
    return re.sub(r"\\(.)", r"\1", quoted[2], flags=re.DOTALL)


def _filter_value(field: str, raw: str) -> Scalar:
    if field not in NUMERIC_FIELDS:
        return raw
    for number in (int, float):
        with suppress(ValueError):
            return number(raw)
    raise QueryError(f"invalid filter: {field} needs a number, got {raw!r}")


def parse_cli_filters(exprs: list[str]) -> Filter | None:
    """The filter all ``--filter`` arguments ``exprs`` make (None for none). Raises QueryError."""
    parts: list[Filter] = []
    ranges: dict[str, dict[str, Scalar]] = {}
    for expr in exprs:
        if (exists := _EXISTS.match(expr)) is not None:
            parts.append(Exists(check_field(exists["field"])))
            continue
        m = _FILTER.match(expr)
        if m is None:
            raise QueryError(f"invalid filter {expr!r}: {_FILTER_FORMS}")
        field, op = check_field(m["field"]), m["op"]
        value = _filter_value(field, _unquote(expr, m["value"]))
        if op == "=":
            parts.append(Term(field, value))
        elif op == "!=":
            parts.append(NoneOf(filters=[Term(field, value)]))
        else:
            if _RANGE_OPS[op] in ranges.get(field, {}):
                raise QueryError(f"invalid filter {expr!r}: {field} has two {op} bounds; give one")
            ranges.setdefault(field, {})[_RANGE_OPS[op]] = value
    parts.extend(Range(field, **bounds) for field, bounds in ranges.items())  # type: ignore[arg-type]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else AllOf(filters=parts)


def query_terms(query: str) -> list[str]:
    """Distinct words of ``query`` worth highlighting (letters/digits, 2+ characters), lower-cased."""
    return list(dict.fromkeys(re.findall(r"\w{2,}", query.lower())))


def _flatten(text: str) -> tuple[str, list[int]]:
    """``text`` with each whitespace run as one space (trimmed), and where each of its offsets lands in that."""
    out: list[str] = []
    at: list[int] = []
    for ch in text:
        at.append(len(out))
        if not ch.isspace():
            out.append(ch)
        elif out and out[-1] != " ":
            out.append(" ")
    at.append(len(out))
    return "".join(out).rstrip(), at


def snippet(text: str, terms: list[str], width: int = SNIPPET_CHARS, spans: Sequence[Highlight] = ()) -> Text:
    """About ``width`` characters of ``text`` around the first match, highlighting ``spans`` (else ``terms``)."""
    flat, at = _flatten(text)
    marks = [(at[h.start], at[h.end]) for h in spans if 0 <= h.start < h.end <= len(text)]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, terms)) + r")\b", re.IGNORECASE) if terms else None
    if not marks and pattern:
        marks = [m.span() for m in pattern.finditer(flat)]
    start = max(0, min((marks[0][0] if marks else 0) - width // 4, len(flat) - width))
    if start:
        space = flat.find(" ", start)
        start = space + 1 if 0 <= space < start + 20 else start
    lead = 1 if start else 0
    out = Text(("…" if start else "") + flat[start:start + width] + ("…" if start + width < len(flat) else ""))
    for a, b in marks:
        a, b = max(a, start), min(b, start + width)
        if a < b:
            out.stylize(HIGHLIGHT, a - start + lead, b - start + lead)
    return out


def _rank(s: StageScore | None) -> str:
    return "-" if s is None else str(s.rank)


NO_CROSS_ENCODER = "not reranked: no cross-encoder on this machine (hsp doctor says how to add one)"


def rerank_note(r: SearchResult) -> str | None:
    """One line on why ``r`` keeps the fused order; None when it was reranked or there was nothing to rerank."""
    if r.rerank_outcome is RerankOutcome.NO_MODEL:
        return NO_CROSS_ENCODER
    if r.rerank_outcome in (RerankOutcome.APPLIED, RerankOutcome.SKIPPED):
        return None
    reason = (r.rerank_reason or "").strip() or r.rerank_outcome.value.replace("_", " ")
    return f"not reranked: {reason.splitlines()[0]}"


def _stage(name: str, s: StageScore | None) -> str:
    return f"{name} –" if s is None else f"{name} #{s.rank} ({s.score:.3g})"


def stages_line(r: SearchResult, hit: Hit) -> str:
    """``BM25 #3 (12.4) · kNN #1 (0.871) · RRF #1 (0.0328)``: the stages ``r`` ran, ``–`` where ``hit`` was not."""
    stages = (("BM25", "bm25"), ("kNN", "knn"), ("RRF", "fused"), ("rerank", "rerank"))
    ran = [(name, field) for name, field in stages if any(getattr(h, field) is not None for h in r.hits)]
    return " · ".join(_stage(name, getattr(hit, field)) for name, field in ran)


def hit_block(out: Console, r: SearchResult, hit: Hit, terms: list[str]) -> list[Text]:
    """One hit in lines of ``out``'s width: rank, title, id; stages; snippet; explanation."""
    width = max(out.width, 2 * INDENT + 20)
    head = styled((f"{hit.rank:>2}. ", "bold"))
    if hit.title:
        title = " ".join(hit.title.split())
        room = max(width - len(head) - len(hit.doc_id) - 2, 20)
        head.append(title if len(title) <= room else title[:room - 1] + "…", style="bold")
        head.append(f"  {hit.doc_id}", style="cyan")
    else:
        head.append(hit.doc_id, style="bold cyan")
    head.truncate(width, overflow="ellipsis")
    pad = " " * INDENT
    lines = [head, Text(pad + stages_line(r, hit), style="dim")]
    room = width - INDENT
    cut = snippet(hit.text, terms, width=room * SNIPPET_LINES, spans=hit.highlights).wrap(out, room)
    shown = list(cut)[:SNIPPET_LINES]
    if len(cut) > SNIPPET_LINES and not shown[-1].plain.endswith("…"):
        shown[-1] = shown[-1].copy()
        shown[-1].truncate(room - 1)
        shown[-1].append("…")
    lines += [Text(pad) + line for line in shown]
    for note in hit.explanation or ():
        lines += wrapped(out, note, INDENT)
    for line in lines:
        line.rstrip()
    return lines


def print_result(out: Console, r: SearchResult, *, said: set[str] | None = None) -> None:
    """Query, timings, then one block per hit; why it is not reranked unless ``said`` has that line (then added)."""
    t = r.timings
    out.print(styled(("» ", "bold"), (r.query, "bold cyan")))
    print_wrapped(out, styled(f"{r.mode} search of ", (r.index, "cyan"),
                              f": {len(r.hits)} hits (page {r.page}) of {r.candidates} candidates"))
    print_wrapped(out, styled((f"{t.total_ms:.0f} ms: embed {t.embed_ms:.0f} · search {t.search_ms:.0f} · fusion "
                               f"{t.fusion_ms:.1f} · rerank {t.rerank_ms:.0f}", "dim")))
    note = rerank_note(r)
    if note and (said is None or note not in said):
        out.print(styled(("not reranked:", "yellow"), note.removeprefix("not reranked:")),
                  no_wrap=True, overflow="ellipsis")
        if said is not None:
            said.add(note)
    if _no_hits(out, r):
        return
    if r.knn_width and any(h.explanation for h in r.hits):
        out.print(styled(("kNN: ", "dim"), r.knn_width))
    terms = query_terms(r.query)
    for hit in r.hits:
        out.print()
        for line in hit_block(out, r, hit, terms):
            out.print(line, no_wrap=True, overflow="ellipsis")


def _no_hits(out: Console, r: SearchResult) -> bool:
    """Say when the query was truncated, and when there are no hits; True when there are none."""
    if r.truncated_query:
        out.print(styled((f"query truncated to {len(r.query)} characters (HSP_QUERY__MAX_QUERY_CHARS)", "yellow")))
    if not r.hits:
        out.print(styled(("no hits", "yellow")))
    return not r.hits


def print_hits_table(out: Console, r: SearchResult) -> None:
    """The result as a table (``--format table``), followed by explanations when present."""
    note = rerank_note(r)
    t = r.timings
    out.print(styled((r.mode, "bold"), " search of ", (r.index, "cyan"),
                     f": {len(r.hits)} hits (page {r.page}) of {r.candidates} candidates · embed "
                     f"{t.embed_ms:.0f} ms, search {t.search_ms:.0f} ms, fusion {t.fusion_ms:.1f} ms, rerank "
                     f"{t.rerank_ms:.0f} ms, total {t.total_ms:.0f} ms"))
    if note:
        out.print(note, no_wrap=True, overflow="ellipsis")
    if _no_hits(out, r):
        return
    terms = query_terms(r.query)
    grid = table(out, *right("#", "score", "bm25", "knn", "fused", "rerank"),
                 Column("doc / title", max_width=24, overflow="fold"), Column("snippet", ratio=1, min_width=32),
                 expand=True)
    for h in r.hits:
        title = Text(h.doc_id, style="cyan")
        if h.title:  # a long title is cut: the table is for reading (--json has it whole)
            title.append("\n" + (h.title if len(h.title) <= TITLE_CHARS else h.title[:TITLE_CHARS - 1] + "…"))
        grid.add_row(str(h.rank), f"{h.score:.4f}", _rank(h.bm25), _rank(h.knn), _rank(h.fused), _rank(h.rerank),
                     title, snippet(h.text, terms, spans=h.highlights))
    out.print(grid)
    if r.knn_width and any(h.explanation for h in r.hits):
        out.print(f"kNN: {r.knn_width}")
    for h in r.hits:
        if h.explanation:
            out.print(styled((f"{h.rank}. {h.doc_id}", "bold"), f" ({h.chunk_id})"))
            for line in h.explanation:
                out.print(f"   {line}")


def print_why(out: Console, w: WhyReport) -> None:
    """Where one document fell at each stage."""
    out.print(styled("why ", (w.doc_id, "cyan"), " for ", (repr(w.query), "bold"),
                     f" ({w.mode}, {w.index}, {w.candidates} candidates):"))
    stages = table(out, "stage", *right("rank", "score"))
    for name, s in (("BM25", w.bm25), ("kNN", w.knn), ("fused", w.fused), ("rerank", w.rerank)):
        stages.add_row(name, _rank(s), "-" if s is None else f"{s.score:.4f}")
    stages.add_row("final", "-" if w.final_rank is None else str(w.final_rank), "")
    out.print(stages)
    for note in w.notes:
        out.print(f" • {note}")
