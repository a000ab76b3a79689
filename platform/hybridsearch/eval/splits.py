"""The guard between the split a choice is made on and the split it is reported on.

Training (reranker, embedder) and fusion calibration choose on one split of a collection (``train``, or
``dev``) and are reported on another (``test``). Both run the same two checks, and both raise:

- :func:`check_split` refuses a protected split (``test``) unless explicitly allowed;
- :func:`check_disjoint` refuses query ids judged in a protected split too, naming them: a query judged in
  both would carry its test answers into the choice. Dropping such queries silently would hide that the
  collection's splits overlap, so neither workflow drops them.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from hybridsearch.errors import ConfigError

PROTECTED_SPLITS = frozenset({"test"})
SHOWN_IDS = 5  # overlapping query ids named in the error


def check_split(split: str, allow_test: bool = False, purpose: str = "train") -> None:
    """Raise ConfigError for a protected split (``test``) unless ``allow_test``: training or selecting anything
    on test queries makes every number measured on them meaningless. ``purpose`` names the verb in the error."""
    if split in PROTECTED_SPLITS and not allow_test:
        raise ConfigError(
            f"refusing to {purpose} on the {split!r} split: its queries are for reporting. Use 'train' "
            "(or 'dev'); pass --allow-test only for a collection you will never evaluate on."
        )


def check_disjoint(dataset: Path, qids: Iterable[str], protected: Iterable[str] = PROTECTED_SPLITS,
                   purpose: str = "training") -> list[str]:
    """Raise ConfigError naming the query ids of ``qids`` also judged in a protected split (``test``) of
    ``dataset``; returns the qrels files checked. Only the query-id column of those files is used. ``purpose``
    names the queries in the error (``training``, ``calibration``)."""
    from hybridsearch.eval.datasets import read_qrels

    root = Path(dataset).expanduser().resolve()
    ours = set(qids)
    checked: list[str] = []
    for split in sorted(protected):
        path = next((p for p in (root / "qrels" / f"{split}.tsv", root / "qrels" / f"{split}.tsv.gz")
                     if p.exists()), None)
        if path is None:
            continue
        shared = ours & set(read_qrels(path))
        if shared:
            some = ", ".join(sorted(shared)[:SHOWN_IDS]) + (" …" if len(shared) > SHOWN_IDS else "")
            raise ConfigError(f"{len(shared)} {purpose} queries are also judged in {path} ({some}): {purpose} and "
                              f"{split} queries must be disjoint, or every {split} figure is contaminated")
        checked.append(str(path))
    return checked
