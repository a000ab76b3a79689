"""``hsp calibrate-fusion``: choose the fusion of hybrid searches on a collection's train judgments and record it
in the index's ``_meta``, where the query layer reads it (``HSP_QUERY__FUSION=auto``, the default)."""

from __future__ import annotations

import argparse
from pathlib import Path

from hybridsearch.cli.output import print_table, styled, table
from hybridsearch.cli.output import stdout as console
from hybridsearch.cli.progress import RichProgress
from hybridsearch.settings import Settings

SHOWN = 8  # grid entries listed


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``calibrate-fusion`` to ``sub``."""
    p = sub.add_parser(
        "calibrate-fusion",
        help="choose the fusion (RRF k, zscore or minmax) and list weights on a collection's train judgments",
        description=(
            "Search every judged query of DATASET's --split (train) once per list on the collection's index "
            "(build it first, e.g. `hsp eval DATASET --prefix P`), score every candidate fusion on those lists "
            "(RRF k 1-100 x BM25 share 0-1, zscore/minmax x share) and record the best in the index's "
            "_meta; searches then use it unless HSP_QUERY__FUSION names one (rrf, zscore, minmax). The default "
            "(RRF k=60, equal weights) is kept unless a candidate beats it by more than --min-gain."
        ),
    )
    p.add_argument("dataset", type=Path, metavar="DATASET", help="BEIR collection folder")
    p.add_argument("--split", default="train",
                   help="qrels split to calibrate on (default train; 'test' is refused, and so is a split sharing "
                        "query ids with test: the error names them)")
    p.add_argument("--prefix", default=None, help="index prefix of the collection's index (default: eval-<name>)")
    p.add_argument("--min-gain", type=float, default=0.002,
                   help="nDCG@10 a candidate must gain over the default to replace it (default 0.002)")
    p.add_argument("--limit-queries", type=int, default=None, metavar="N", help="use the first N judged queries")
    p.add_argument("--dry-run", action="store_true", help="measure and report, record nothing")
    p.add_argument("--keep-identical-ids", action="store_true",
                   help="keep hits whose id equals the query id (BEIR drops them; so do we by default)")
    p.add_argument("--out", type=Path, default=Path("reports"), help="folder for the JSON report")
    p.add_argument("--allow-test", action="store_true",
                   help="allow --split test (never for a collection whose test numbers you report)")
    p.set_defaults(handler=calibrate_fusion)


def calibrate_fusion(args: argparse.Namespace, settings: Settings) -> int:
    """Handler of ``hsp calibrate-fusion``. Raises ConfigError, IndexNotFound, IndexMismatch, ClusterError."""
    from hybridsearch.eval.calibrate import calibrate_fusion as run

    with RichProgress(console, width=10) as progress:
        done = run(args.dataset, settings, split=args.split, allow_test=args.allow_test, prefix=args.prefix,
                   min_gain=args.min_gain, limit_queries=args.limit_queries, dry_run=args.dry_run,
                   keep_identical_ids=args.keep_identical_ids, out=args.out, progress=progress)
    console.print(f"scored fusions on {done.calibration.queries} {done.split} queries of {done.index}")
    scores, calibration = done.calibration.scores, done.meta
    grid = table(console, title=f"nDCG@10 on {calibration['queries']} {calibration['split']} queries (best of "
                 f"{len(scores)} fusions first)")
    grid.add_column("fusion")
    grid.add_column("nDCG@10", justify="right")
    for name, value in list(scores.items())[:SHOWN]:
        grid.add_row(name, f"{value:.4f}")
    print_table(console, grid)
    console.print(f"BM25 alone {calibration['bm25']:.4f} · kNN alone {calibration['knn']:.4f} · default "
                  f"{calibration['default']:.4f} · chosen {calibration['chosen']:.4f}")
    if "heldout_chosen" in calibration:
        console.print(f"2-fold check (chosen on one half, scored on the other): default "
                      f"{calibration['heldout_default']:.4f} → chosen {calibration['heldout_chosen']:.4f}")
    else:
        console.print("2-fold check: too few queries")
    verb = "recorded" if done.recorded else "would record"
    console.print(styled((f"{verb} in {done.index}'s _meta: ", "bold"), done.calibration.chosen.label))
    console.print(f"wrote {done.report}")
    return 0
