"""Report context: settings with secrets masked, git commit, index signatures for reuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hybridsearch.errors import ConfigError
from hybridsearch.eval.harness import build_signature, eval_settings, git_info, redacted_settings
from hybridsearch.settings import load_settings

ROOT = Path(__file__).resolve().parents[2]


def test_secrets_and_url_credentials_never_reach_the_report() -> None:
    s = load_settings(es_url="https://elastic:hunter2@es.example:9200", es={"password": "pw-secret",
                      "api_key": "key-secret"}, reranker={"token": "tok-secret", "url": "http://u:p4ss@rr:8000"})
    text = json.dumps(redacted_settings(s))
    for secret in ("hunter2", "pw-secret", "key-secret", "tok-secret", "p4ss"):
        assert secret not in text
    assert "es.example:9200" in text and "***@" in text


def test_git_info_names_the_checkout_commit(tmp_path: Path) -> None:
    info = git_info(ROOT)
    assert info["commit"] is None or len(info["commit"]) == 40
    assert git_info(tmp_path) == {"commit": None, "dirty": False}


def test_eval_settings_use_their_own_prefix() -> None:
    s = eval_settings(load_settings(), "eval-scifact")
    assert s.index.alias == "eval-scifact-chunks" and s.query == load_settings().query
    with pytest.raises(ConfigError, match="prefix 'Bad Prefix' is not valid"):
        eval_settings(load_settings(), "Bad Prefix")


def test_the_build_signature_follows_the_settings() -> None:
    s = load_settings()
    other = load_settings(index={"index_options": "hnsw"}, chunking={"max_tokens": 128})
    sig = build_signature(other)
    assert sig != build_signature(s) and sig["index_options"] == "hnsw"
