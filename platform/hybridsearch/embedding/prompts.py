"""The one place that knows a model's query and passage prompts.

Some model families embed a text together with an instruction put before it: bge-small-en-v1.5 puts
``Represent this sentence for searching relevant passages: `` before a query and nothing before a passage,
e5 ``query: `` and ``passage: ``; all-MiniLM-L6-v2 uses none. A vector made without the prompt its model was
trained with is a worse vector, and a vector made with one never compares well with one made without it, so
every text embedded goes through :func:`resolve_prompts`:

1. ``HSP_EMBEDDING__QUERY_PROMPT`` / ``HSP_EMBEDDING__PASSAGE_PROMPT`` when set (an empty value: no prompt);
2. else the model's catalogue entry (:mod:`.catalogue`, by name or alias);
3. else the ``prompts`` of the folder's ``config_sentence_transformers.json`` (a local folder, a fetched
   catalogue model, a model trained by ``hsp train-embedder``, a Hub model already in the Hugging Face cache):
   ``query``, and ``passage`` (else ``document``, else ``corpus``, as sentence-transformers'
   ``encode_document`` looks them up);
4. else none.

The prompts are passed to sentence-transformers explicitly (never by ``default_prompt_name``), so the
:class:`~hybridsearch.embedding.Embedder` decides them alone. Nothing here loads a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hybridsearch.embedding import catalogue
from hybridsearch.embedding.models import resolve_model
from hybridsearch.settings import EmbeddingSettings

#: the folder config's keys for a passage prompt, in the order sentence-transformers' ``encode_document`` tries
PASSAGE_KEYS = ("passage", "document", "corpus")
ST_CONFIG = "config_sentence_transformers.json"
Source = Literal["catalogue", "folder", "none"]


@dataclass(frozen=True)
class Prompts:
    """The text put before each query and each passage embedded ("" for none), and where the model's own came
    from (``source``; the settings may still have overridden either: ``overridden``)."""

    query: str = ""
    passage: str = ""
    source: Source = "none"
    overridden: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.query or self.passage)

    def describe(self) -> str:
        """One line for people: ``query 'query: ', passage 'passage: ' (catalogue)``."""
        how = self.source + (f", {' and '.join(self.overridden)} from the settings" if self.overridden else "")
        return f"query {self.query!r}, passage {self.passage!r} ({how})"


NONE = Prompts()


def folder_prompts(folder: str | Path) -> dict[str, str]:
    """The ``prompts`` table of ``folder``'s ``config_sentence_transformers.json`` (``{}`` when it has none or
    the file is missing or unreadable)."""
    return _read_prompts(Path(folder) / ST_CONFIG)


def _read_prompts(path: Path) -> dict[str, str]:
    try:
        config: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    table = config.get("prompts") if isinstance(config, dict) else None
    if not isinstance(table, dict):
        return {}
    return {str(k): v for k, v in table.items() if isinstance(v, str)}


def _hub_cached_prompts(name: str) -> dict[str, str]:
    """The prompts of a Hub model's config in the local Hugging Face cache (no network), else ``{}``."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub ships with sentence-transformers
        return {}
    try:
        found = try_to_load_from_cache(name, ST_CONFIG)
    except Exception:  # noqa: BLE001 - an invalid repo id has no cached config
        return {}
    return _read_prompts(Path(found)) if isinstance(found, str) else {}


def _from_table(table: dict[str, str]) -> tuple[str, str]:
    passage = next((table[k] for k in PASSAGE_KEYS if table.get(k)), "")
    return table.get("query") or "", passage


def model_prompts(name: str) -> Prompts:
    """The model's own prompts (steps 2 to 4 of the module docstring); no settings applied."""
    entry = catalogue.entry(name)
    if entry is not None:
        return Prompts(entry.query_prompt, entry.passage_prompt, "catalogue") if entry.prompts else NONE
    where = resolve_model(name)
    table = folder_prompts(where) if Path(where).is_dir() else _hub_cached_prompts(name)
    query, passage = _from_table(table)
    return Prompts(query, passage, "folder") if query or passage else NONE


def resolve_prompts(cfg: EmbeddingSettings) -> Prompts:
    """The prompts ``cfg`` embeds with: the settings' ``query_prompt`` / ``passage_prompt`` where set (``""``
    disables), else the model's own (:func:`model_prompts`)."""
    own = model_prompts(cfg.model)
    overridden = tuple(k for k in ("query", "passage") if getattr(cfg, f"{k}_prompt") is not None)
    if not overridden:
        return own
    return Prompts(cfg.query_prompt if cfg.query_prompt is not None else own.query,
                   cfg.passage_prompt if cfg.passage_prompt is not None else own.passage, own.source, overridden)
