from __future__ import annotations

from pathlib import Path

import pytest

from hybridsearch.errors import ConfigError
from hybridsearch.settings import load_settings


def test_defaults() -> None:
    s = load_settings()
    assert s.index.analyzer == "auto"
    assert s.index.index_options == "int8_hnsw"
    assert s.embedding.dims == 384
    assert s.index.alias == "hsp-chunks"
    assert s.index.versioned(3) == "hsp-chunks-v3"


def test_env_nested_and_shortcut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_INDEX__PREFIX", "team-a")
    monkeypatch.setenv("HSP_RERANKER__DEVICE", "cpu")
    monkeypatch.setenv("HSP_ES_URL", "http://localhost:9999")
    monkeypatch.setenv("HSP_ES__API_KEY", "c2VjcmV0")
    s = load_settings()
    assert s.index.alias == "team-a-chunks"
    assert s.reranker.device == "cpu"
    assert [n.url for n in s.es.nodes] == ["http://localhost:9999"]
    assert s.es.api_key is not None and "c2VjcmV0" not in repr(s.es.api_key)
    assert s.es.api_key.get_secret_value() == "c2VjcmV0"


@pytest.mark.parametrize(
    ("var", "value"),
    [("HSP_EMBEDDING__DIMS", "zero"), ("HSP_INDEX__INDEX_OPTIONS", "bogus"), ("HSP_ES__URL", "localhost:9200"),
     ("HSP_ES_URL", "user:pw@127.0.0.1:9200"),
     ("HSP_INDEX__PREFIX", "Bad Prefix")],
)
def test_invalid_setting_names_the_variable(monkeypatch: pytest.MonkeyPatch, var: str, value: str) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=var):
        load_settings()


def test_missing_ca_file_stops_at_start_up(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HSP_ES__CA_CERTS", str(tmp_path / "no-such-ca.pem"))
    with pytest.raises(ConfigError, match=r"HSP_ES__CA_CERTS: CA certificate file '.*no-such-ca.pem' does not exist"):
        load_settings()
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    monkeypatch.setenv("HSP_ES__CA_CERTS", str(tmp_path / "ca.pem"))
    assert load_settings().es.ca_certs == tmp_path / "ca.pem"
