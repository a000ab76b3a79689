"""``hsp doctor`` against a real node: what it finds, the fixes it gives, its exit code."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from hybridsearch import doctor
from hybridsearch.cli.main import main
from hybridsearch.doctor import watermark_used_fraction
from hybridsearch.engine import EngineClient, request
from hybridsearch.index.spec import has_analyzer
from hybridsearch.index.versions import ensure_index
from hybridsearch.settings import Settings, load_settings

MODELS = load_settings().models


def by_name(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {f"{c.area}.{c.name}": c for c in checks}


def test_missing_index_fails_with_a_fix(es: EngineClient, settings: Settings) -> None:
    checks = by_name(doctor.run_checks(settings, es=es, models=False, reranker=False))
    assert checks["cluster.reachable"].status == "OK"
    assert checks["cluster.version"].status == "OK"
    assert checks["cluster.version"].detail == f"{es.engine.kind} {es.engine.version}"
    assert checks["cluster.disk"].status in {"OK", "WARN"} and "GiB free" in checks["cluster.disk"].detail
    access = checks["index.privileges"]  # the superuser on a secured node, anyone on a plain one
    ahead = {"elasticsearch": ("may ingest", "security is off"), "opensearch": ("not checked ahead on OpenSearch",)}
    assert access.status == "OK" and any(s in access.detail for s in ahead[es.engine.kind]), access
    assert checks["index.alias"].status == "FAIL" and "hsp ingest" in (checks["index.alias"].fix or "")
    assert checks["models.embedder"].status == "SKIP"
    assert doctor.failed(list(checks.values()))


def test_healthy_index_passes(es: EngineClient, settings: Settings) -> None:
    name = ensure_index(es, settings)
    es.send(request.put_doc(name, "a#0", {"doc_id": "a", "chunk_id": "a#0", "text": "hello"}, refresh=True))
    checks = by_name(doctor.run_checks(settings, es=es, models=False, reranker=False))
    for key in ("index.privileges", "index.alias", "index.model", "index.vectors", "index.chunks"):
        assert checks[key].status == "OK", checks[key]
    assert checks["index.vectors"].detail.startswith("384 dims, cosine, int8_hnsw")
    assert checks["index.chunks"].detail.startswith("1 chunks")
    # english analysis where the cluster has it; a WARN that says what is lost where not (the ES test zips)
    english = has_analyzer(es, "english")
    assert checks["index.analyzer"].status == ("OK" if english else "WARN")
    assert ("english" if english else "no stemming") in checks["index.analyzer"].detail
    assert not doctor.failed([c for c in checks.values() if c.area == "index" and c.name != "analyzer"],
                             strict=True)


def test_an_index_without_the_knn_filter_setting_or_full_of_deleted_copies_is_a_warning(
    es: EngineClient, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = ensure_index(es, settings)
    docs = [{"doc_id": f"d{i}", "chunk_id": f"d{i}#0", "text": f"copy {i}"} for i in range(4)]
    for d in docs + docs:  # the second write of each leaves a deleted copy
        es.send(request.put_doc(name, d["chunk_id"], d))
    es.send(request.refresh(name))
    assert "index.deleted" not in by_name(doctor.run_checks(settings, es=es, models=False, reranker=False))
    monkeypatch.setattr(doctor, "DELETED_WARN_MIN", 2)  # 4 deleted copies of 8 documents: a warning here
    checks = by_name(doctor.run_checks(settings, es=es, models=False, reranker=False))
    assert checks["index.deleted"].status == "WARN" and "only_expunge_deletes" in (checks["index.deleted"].fix or "")
    assert "index.knn filter" not in checks  # ensure_index set it where the engine needs it
    want = es.engine.chunk_index_settings
    if want:  # Elasticsearch 9.1+: an index made before the setting
        es.send(request.put_settings(name, {k: "acorn" for k in want}))
        check = by_name(doctor.run_checks(settings, es=es, models=False, reranker=False))["index.knn filter"]
        assert check.status == "WARN" and "hsp ingest" in (check.fix or "")


def test_model_mismatch_is_a_failure_naming_both_ways_out(es: EngineClient, settings: Settings) -> None:
    ensure_index(es, settings)
    other = settings.model_copy(update={"embedding": settings.embedding.model_copy(update={"model": "x/y",
                                                                                          "dims": 64})})
    checks = by_name(doctor.run_checks(other, es=es, models=False, reranker=False))
    assert checks["index.model"].status == "FAIL"
    fix = checks["index.model"].fix or ""
    assert f"HSP_EMBEDDING__MODEL={settings.embedding.model}" in fix and "hsp index migrate" in fix
    assert checks["index.vectors"].status == "FAIL" and "384" in checks["index.vectors"].detail


def test_unreachable_cluster_skips_index_checks() -> None:
    settings = load_settings(es_url="http://127.0.0.1:1")
    es = EngineClient(settings.es.model_copy(update={"max_retries": 0}))
    checks = doctor.run_checks(settings, es=es, models=False, reranker=False)
    assert [(c.area, c.status) for c in checks[:2]] == [("cluster", "FAIL"), ("index", "SKIP")]
    assert "es-local.sh" in (checks[0].fix or "")


def test_embedder_check(settings: Settings, tmp_path: Any) -> None:
    broken = settings.embedding.model_copy(update={"model": str(tmp_path / "no-such-model")})
    check = doctor.check_embedder(broken, MODELS)
    assert check.status == "FAIL" and "HSP_EMBEDDING__MODEL" in (check.fix or "")
    wrong_dims = settings.embedding.model_copy(update={"dims": 64})
    check = doctor.check_embedder(wrong_dims, MODELS)
    assert check.status == "FAIL" and "384-dim" in check.detail


class _Readyz(BaseHTTPRequestHandler):
    status = 200

    def do_GET(self) -> None:
        body = json.dumps({"ready": self.status == 200, "reason": "loading"}).encode()
        self.send_response(self.status if self.path == "/readyz" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def reranker_service() -> Iterator[tuple[str, type[_Readyz]]]:
    handler = type("H", (_Readyz,), {"status": 200})
    server = HTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def test_reranker_service_readiness(settings: Settings, reranker_service: tuple[str, Any]) -> None:
    url, handler = reranker_service
    cfg = settings.reranker.model_copy(update={"url": url})
    assert doctor.check_reranker(cfg, MODELS).status == "OK"
    handler.status = 503
    check = doctor.check_reranker(cfg, MODELS)
    assert check.status == "WARN" and "503" in check.detail and "fused order" in check.detail
    down = cfg.model_copy(update={"url": "http://127.0.0.1:1"})
    assert doctor.check_reranker(down, MODELS).status == "WARN"
    off = cfg.model_copy(update={"enabled": False})
    assert doctor.check_reranker(off, MODELS).status == "OK"


@pytest.mark.parametrize("value, total, expected", [
    ("85%", 100, 0.85), ("0.9", 100, 0.9), ("1gb", 10 * 1024**3, 0.9), ("512mb", 1024**3, 0.5), ("100b", 200, 0.5),
])
def test_watermarks_as_used_fraction(value: str, total: int, expected: float) -> None:
    assert watermark_used_fraction(value, total) == pytest.approx(expected)


def test_cli_exit_codes(es: EngineClient, settings: Settings, monkeypatch: pytest.MonkeyPatch,
                        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HSP_ES_URL", settings.es.url)
    monkeypatch.setenv("HSP_INDEX__PREFIX", settings.index.prefix)
    assert main(["doctor", "--no-models", "--no-reranker", "--json"]) == 1  # no alias yet
    report = json.loads(capsys.readouterr().out)
    assert {"area": "index", "name": "alias", "status": "FAIL"}.items() <= next(
        c for c in report if c["name"] == "alias").items()
    ensure_index(es, settings)
    es.send(request.put_doc(settings.index.alias, "a#0", {"doc_id": "a", "text": "x"}, refresh=True))
    assert main(["doctor", "--no-models", "--no-reranker"]) == 0
    assert "healthy" in capsys.readouterr().out
