"""Every ``python`` block of the README runs, as written, against the node, on a small index built for it.

The index gets a few documents with what the README's examples ask for (source ``pubmed``, a tau protein
passage), under the test's own prefix (deleted afterwards by the ``settings`` fixture). Each block runs in a
fresh interpreter with the environment a reader would have: ``HSP_ES_URL`` (and a secured node's
credentials) plus ``HSP_INDEX__PREFIX``. The README's shell commands are tests/unit/test_readme_commands.py.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document
from hybridsearch.settings import Settings
from readme_blocks import Block, blocks

CORPUS = {
    "tau-1": ("Tau protein in Alzheimer disease", "Hyperphosphorylated tau protein forms neurofibrillary tangles "
              "in the brains of patients with Alzheimer disease."),
    "tau-2": ("Microtubule binding", "Tau stabilises microtubules in neurons; its loss of binding leads to "
              "axonal transport defects."),
    "vitd-1": ("Vitamin D and fractures", "Daily vitamin D supplements did not prevent hip fractures in older "
               "adults in a randomised trial."),
    "statin-1": ("Statins", "Statins lower LDL cholesterol and reduce cardiovascular events."),
}


@pytest.mark.parametrize("block", blocks("python"), ids=lambda b: f"README.md:{b.line}")
def test_readme_python_block_runs(block: Block, es: EngineClient, es_url: str, settings: Settings,
                                  embedder: Embedder) -> None:
    docs = [Document.make(doc_id, text, title=title, source="pubmed") for doc_id, (title, text) in CORPUS.items()]
    ingested = run_ingest(docs, settings, es=es, embedder=embedder)
    assert (ingested.status, ingested.documents_indexed) == ("completed", len(docs))
    env = {**os.environ, "HSP_ES_URL": es_url, "HSP_INDEX__PREFIX": settings.index.prefix, "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    env.pop("HSP_ES__URL", None)
    done = subprocess.run([sys.executable, "-c", block.code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"README.md:{block.line} failed:\n{done.stderr[-4000:]}"
    assert "tau-1" in done.stdout, done.stdout  # it found the passage the example asks for
