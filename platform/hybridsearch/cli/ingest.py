"""`hsp ingest PATH` and `hsp delete DOC_ID…`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from hybridsearch.cli import AddCommand
from hybridsearch.cli.output import RichProgress, print_table, right, styled, table
from hybridsearch.cli.output import stdout as console
from hybridsearch.errors import ConfigError
from hybridsearch.settings import Settings

if TYPE_CHECKING:
    from hybridsearch.ingest.sources import RecordFields


def register(add: AddCommand) -> None:
    p = add("ingest", run_ingest_command, help="read, chunk, embed and index documents from a file or folder",
            description="Ingest a folder tree (.txt .md .html .json .jsonl) or a BEIR corpus.jsonl[.gz]. Unchanged "
                        "documents are skipped, changed ones replaced; failures go to a dead-letter file.")
    p.add_argument("path", type=Path, help="file or folder")
    p.add_argument("--workers", type=int, help="embedding processes (default: HSP_INGEST__WORKERS, 1)")
    p.add_argument("--shard", metavar="I/N", help="only documents whose id hashes to shard I of N")
    p.add_argument("--strategy", choices=["paragraph", "sentence", "token", "fixed", "parent_child"],
                   help="chunking strategy (default: HSP_CHUNKING__STRATEGY, paragraph)")
    p.add_argument("--max-tokens", type=int, help="chunk size in word pieces")
    p.add_argument("--batch-size", type=int, help="embedding batch size")
    p.add_argument("--backend", choices=["auto", "torch", "onnx"], help="embedding backend")
    p.add_argument("--id-field", help="JSON field holding the document id (default: _id/id/doc_id)")
    p.add_argument("--title-field", default="title", help="JSON field holding the title")
    p.add_argument("--text-field", help="JSON field holding the text (default: text/body/content)")
    p.add_argument("--metadata-field", default="metadata", help="JSON object field copied into metadata")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--wait", type=float, metavar="SECONDS",
                   help="wait this long for another run of the prefix holding the ingest lease (default: "
                   "HSP_INGEST__LEASE_WAIT_S, 0: refuse at once, naming it)")
    p.add_argument("--sync", action="store_true",
                   help="mirror the source: also delete the documents read from it before that it no longer holds")
    p.add_argument("--dry-run", action="store_true", help="with --sync: print what would be added, replaced and "
                   "deleted, and write nothing")
    p.add_argument("--force", action="store_true", help="with --sync: delete even more than "
                   "HSP_INGEST__SYNC_MAX_DELETE of the source's documents")
    d = add("delete", run_delete_command, help="remove documents (all their chunks) from the index")
    d.add_argument("doc_ids", nargs="+", metavar="DOC_ID")


#: the settings fields the ingest options of the same names override, by section
OPTIONS = {"ingest": ("workers",), "chunking": ("strategy", "max_tokens"), "embedding": ("batch_size", "backend")}


def apply_options(args: argparse.Namespace, settings: Settings) -> Settings:
    """``settings`` with the sections the options given override, validated; what was unset stays unset (so that
    ingestion still follows the index's model)."""
    update: dict[str, object] = {}
    try:
        for section, fields in OPTIONS.items():
            current = getattr(settings, section)
            given = {field: getattr(args, field) for field in fields if getattr(args, field) is not None}
            update[section] = current.model_validate({**current.model_dump(exclude_unset=True), **given})
        return settings.model_copy(update=update)
    except ValueError as exc:
        raise ConfigError(f"bad ingest option: {exc}") from None


def run_ingest_command(args: argparse.Namespace, settings: Settings) -> int:
    from hybridsearch.embedding.encoder import Embedder
    from hybridsearch.ingest.lease import parse_shard
    from hybridsearch.ingest.pipeline import run_ingest
    from hybridsearch.ingest.sources import RecordFields

    settings = apply_options(args, settings)
    try:
        shard = parse_shard(args.shard) if args.shard else None
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if not args.path.exists():
        raise ConfigError(f"{args.path} does not exist")
    fields = RecordFields(id=args.id_field, title=args.title_field, text=args.text_field,
                          metadata=args.metadata_field)
    if args.wait is not None and args.wait < 0:
        raise ConfigError(f"--wait must be 0 or more seconds, got {args.wait:g}")
    if (args.dry_run or args.force) and not args.sync:
        raise ConfigError("--dry-run and --force go with --sync")
    if args.dry_run:
        return _print_plan(args.path, settings, fields, shard)
    embedder = Embedder(settings.embedding, settings.models)
    with RichProgress(enabled=not args.no_progress, keep_finished=False) as progress:  # the summary follows
        result = run_ingest(args.path, settings, embedder=embedder, progress=progress, shard=shard,
                            fields=fields, wait_s=args.wait, sync=args.sync, force=args.force)
    grid = table(console, *right("documents", "chunks"), title=f"ingest run {result.run_id} → {result.index}")
    docs = (f"{result.documents:,} read\n{result.documents_indexed:,} indexed\n"
            f"{result.documents_skipped:,} unchanged\n{result.documents_failed:,} failed")
    if args.sync:
        docs += f"\n{result.documents_deleted:,} deleted"
    chunks = (f"{result.indexed:,} new\n{result.updated:,} updated\n{result.unchanged:,} unchanged\n"
              f"{result.reused:,} reused (written by a stopped run)\n"
              f"{result.deleted:,} deleted\n{result.failed:,} failed ({result.retried:,} retries)")
    grid.add_row(docs, chunks)
    print_table(console, grid)
    console.print(f"{result.seconds:.1f} s · {result.chunks_per_second:,.1f} chunks/s · chunker {result.chunker}")
    notes = [(result.titles_cut, ("Titles cut:", "yellow"), f" {result.titles_cut:,} documents have a title longer "
              "than a quarter of what the model reads; only its start is embedded, so the text still is"),
             (result.took_over, ("Took over", "yellow"), f" the ingest lease of {', '.join(result.took_over)} "
              "(stopped without finishing)"),
             (result.repaired, ("Repaired:", "green"), f" {result.repaired:,} documents a stopped run had left half "
              "written are whole and searchable again"),
             (result.still_hidden, ("Still hidden:", "yellow"), f" {result.still_hidden:,} documents are not whole (a "
              "failed chunk or a stopped run) and stay out of every search; re-run with their sources to finish them "
              "(`hsp doctor` lists them)"),
             (result.changed_nothing, ("Nothing changed:", "green"), " every document was already indexed."),
             (result.sync_withheld, ("Nothing deleted:", "yellow"), f" {result.sync_withheld}"),
             (result.dead_letter_path, ("Failures recorded in", "yellow"), f" {result.dead_letter_path}")]
    for shown, label, text in notes:
        if shown:
            console.print(styled(label, text))
    if result.status == "interrupted":
        console.print(styled(("Interrupted:", "yellow"), " re-run the same command to resume."))
        return 130
    return 1 if result.documents_failed or result.failed else 0


def _print_plan(path: Path, settings: Settings, fields: RecordFields, shard: tuple[int, int] | None) -> int:
    """``hsp ingest --sync --dry-run``: what a sync would add, replace and delete; writes nothing."""
    from hybridsearch.engine import EngineClient
    from hybridsearch.ingest.sync import plan_sync, refusal

    plan = plan_sync(path, settings.index, EngineClient(settings.es), fields, shard)
    console.print(f"sync of {plan.source} (dry run, nothing written): {len(plan.added):,} to add, "
                  f"{len(plan.replaced):,} to replace, {len(plan.deleted):,} to delete, {plan.unchanged:,} unchanged")
    for word, ids in (("add", plan.added), ("replace", plan.replaced), ("delete", plan.deleted)):
        for doc_id in ids:
            console.print(f"  {word:<7} {doc_id}")
    if plan.failures:
        console.print(f"Nothing would be deleted: {len(plan.failures):,} inputs cannot be read "
                      f"(e.g. {plan.failures[0]})")
    elif refusal(Path(plan.source), len(plan.deleted), plan.owned, settings.ingest):
        console.print(f"Refused without --force: {len(plan.deleted):,} of {plan.owned:,} documents is more than "
                      f"HSP_INGEST__SYNC_MAX_DELETE={settings.ingest.sync_max_delete:g} of them")
    return 0


def run_delete_command(args: argparse.Namespace, settings: Settings) -> int:
    from hybridsearch.ingest.commit import delete_documents

    n = delete_documents(args.doc_ids, settings)
    console.print(f"deleted {n:,} chunks of {len(set(args.doc_ids)):,} document id(s)")
    return 0
