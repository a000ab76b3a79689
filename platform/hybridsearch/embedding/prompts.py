"""The one place that decides a model's query and passage prompts (:func:`resolve_prompts`): the settings' where set,
else the catalogue entry's, else the folder's ``config_sentence_transformers.json`` (docs/models.md, Prompts).
Nothing here loads a model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from hybridsearch.embedding import catalogue
from hybridsearch.embedding.models import hub_cached, resolve_model
from hybridsearch.settings import EmbeddingSettings, ModelsSettings

#: the folder config's keys for a passage prompt, in the order sentence-transformers' ``encode_document`` tries
PASSAGE_KEYS = ("passage", "document", "corpus")
ST_CONFIG = "config_sentence_transformers.json"
Source = Literal["catalogue", "folder", "none"]


@dataclass(frozen=True)
class Prompts:
    """The text put before each query and each passage embedded ("" for none), where the model's own came from,
    and which the settings ``overridden``."""

    query: str = ""
    passage: str = ""
    source: Source = "none"
    overridden: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.query or self.passage)


NONE = Prompts()


def folder_prompts(folder: str | Path) -> dict[str, str]:
    """The ``prompts`` table of ``folder``'s ``config_sentence_transformers.json``, else ``{}``."""
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


def model_prompts(name: str, models: ModelsSettings | None = None) -> Prompts:
    """The model's own prompts (catalogue, else its folder's or cached Hub config); no settings applied."""
    entry = catalogue.entry(name)
    if entry is not None:
        return Prompts(entry.query_prompt, entry.passage_prompt, "catalogue") if entry.prompts else NONE
    where = resolve_model(name, models)
    cached = None if Path(where).is_dir() else hub_cached(name, ST_CONFIG)
    table = folder_prompts(where) if cached is None else _read_prompts(cached)
    query, passage = table.get("query") or "", next((table[k] for k in PASSAGE_KEYS if table.get(k)), "")
    return Prompts(query, passage, "folder") if query or passage else NONE


def resolve_prompts(cfg: EmbeddingSettings, models: ModelsSettings | None = None) -> Prompts:
    """The prompts ``cfg`` embeds with: the settings' ``query_prompt`` / ``passage_prompt`` where set (``""``
    disables), else the model's own (:func:`model_prompts`)."""
    own = model_prompts(cfg.model, models)
    overridden = tuple(k for k in ("query", "passage") if getattr(cfg, f"{k}_prompt") is not None)
    if not overridden:
        return own
    return Prompts(cfg.query_prompt if cfg.query_prompt is not None else own.query,
                   cfg.passage_prompt if cfg.passage_prompt is not None else own.passage, own.source, overridden)
