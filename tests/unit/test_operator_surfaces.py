"""Operator surfaces that never leak or mislead, against stand-in servers.

* A URL's credentials (``https://user:p[a]ss@host``) are never printed: ``hsp doctor`` (table and JSON),
  connection errors of ``hsp search`` and ``hsp index status`` (with and without ``-v`` logs), TLS and scheme
  errors, the settings' own validation error, the reranker client's errors and the evaluation report's settings.
* An ``http://`` URL to a node that speaks TLS, and an ``https://`` URL to a plain node, say so plainly.
* Engine detection against a node that answers ``GET /`` with 405 (the Elasticsearch integ-test zip) logs no
  node failure.
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import socket
from collections.abc import Iterator
from typing import Any

import pytest

import hybridsearch.engine.client as engine_client
from hybridsearch.cli import output
from hybridsearch.cli.main import exit_code, main
from hybridsearch.cluster_url import redact_url
from hybridsearch.engine import AsyncEngineClient, EngineClient, EngineInfo, cluster_info, request
from hybridsearch.errors import ClusterUnavailable, RerankerError, SchemeMismatch, TlsFailure
from hybridsearch.eval.harness import redacted_settings
from hybridsearch.rerank import HttpReranker
from hybridsearch.settings import ClusterSettings, load_settings
from standin import Canned, serve

SECRET = "p[a]ss"
RERANK_SECRET = "r3rank-s3cret"

pytestmark = pytest.mark.usefixtures("restore_client_log_levels")


def dead_port() -> int:
    """A loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def with_password(url: str, user: str = "elastic", password: str = SECRET) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{user}:{password}@{rest}"


def printed(capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture | None = None) -> str:
    out = capsys.readouterr()
    logs = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records) if caplog else ""
    return out.out + out.err + logs


# ----------------------------------------------------------------------------- credentials in URLs


@pytest.mark.parametrize(("text", "shown"), [
    ("https://elastic:p[a]ss@host:9200", "https://***@host:9200"),
    ("https://user:p@ss@host:9200/prefix", "https://***@host:9200/prefix"),  # '@' in the password
    ("http://a:b@h1:9200,https://c:d@h2:9200", "http://***@h1:9200,https://***@h2:9200"),
    ("request to http://u:s@h:1/x failed; see https://docs.example/a@b", "request to http://***@h:1/x failed; "
                                                                         "see https://docs.example/a@b"),
    ("elastic:secret@host:9200", "***@host:9200"),  # no scheme
    ("http://127.0.0.1:9200", "http://127.0.0.1:9200"),
    ("mail bob@example.com about http://host/", "mail bob@example.com about http://host/"),
])
def test_redact_url_cuts_user_info_only(text: str, shown: str) -> None:
    assert redact_url(text) == shown


def test_doctor_never_prints_the_password(fake_es: Canned, monkeypatch: pytest.MonkeyPatch,
                                          capsys: pytest.CaptureFixture[str],
                                          caplog: pytest.LogCaptureFixture) -> None:
    fake_es.status = 401  # the cluster checks fail (printing the URL's node), the reranker check still runs
    monkeypatch.setenv("HSP_ES_URL", with_password(fake_es.url))
    monkeypatch.setenv("HSP_RERANKER__URL", with_password(f"http://127.0.0.1:{dead_port()}", "rr", RERANK_SECRET))
    monkeypatch.setenv("HSP_ES__MAX_RETRIES", "0")
    main(["doctor", "--no-models"])
    table = printed(capsys, caplog)
    main(["doctor", "--no-models", "--json"])
    as_json = printed(capsys, caplog)
    for text in (table, as_json):
        assert SECRET not in text and RERANK_SECRET not in text
    assert "elastic:" not in table and "***@127.0.0.1" in table  # the URL is shown, without its user-info
    assert any("***@127.0.0.1" in c["detail"] for c in json.loads(as_json) if c["area"] == "reranker")


@pytest.mark.parametrize("argv", [["search", "vitamin d", "--mode", "bm25", "--no-rerank"], ["index", "status"],
                                  ["-v", "index", "status"], ["-v", "doctor", "--no-models", "--no-reranker"]])
def test_connection_errors_never_print_the_password(argv: list[str], monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str],
                                                    caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("HSP_ES_URL", with_password(f"http://127.0.0.1:{dead_port()}"))
    monkeypatch.setenv("HSP_ES__MAX_RETRIES", "1")
    caplog.set_level(logging.DEBUG)
    assert main(argv) != 0
    text = printed(capsys, caplog)
    assert SECRET not in text and "127.0.0.1" in text


def test_scheme_errors_never_print_the_password(fake_es: Canned, self_signed_es: Canned,
                                                monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    for url in (fake_es.url.replace("http://", "https://"), self_signed_es.url.replace("https://", "http://"),
                self_signed_es.url):  # https to plain, http to TLS, an untrusted certificate
        monkeypatch.setenv("HSP_ES_URL", with_password(url))
        assert main(["-v", "index", "status"]) == 3
        main(["doctor", "--no-models", "--no-reranker"])
        text = printed(capsys, caplog)
        assert SECRET not in text and "127.0.0.1" in text


def test_an_invalid_url_is_named_without_its_password(monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HSP_ES_URL", f"ftp://elastic:{SECRET}@127.0.0.1:9200")
    assert main(["index", "status"]) == 2
    text = printed(capsys)
    assert SECRET not in text and "'ftp://***@127.0.0.1:9200' is not an http(s) URL" in text


def test_reranker_client_errors_never_carry_the_password() -> None:
    url = with_password(f"http://127.0.0.1:{dead_port()}", "rr", RERANK_SECRET)
    with HttpReranker(url, timeout=2) as reranker:
        assert RERANK_SECRET not in reranker.name
        with pytest.raises(RerankerError) as err:
            reranker.score("q", ["a"])
    assert RERANK_SECRET not in str(err.value) and "***@127.0.0.1" in str(err.value)


def test_eval_report_settings_carry_no_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_ES_URL", "https://elastic:p[a]ss@a:9200,https://elastic:p[a]ss@b:9200")
    monkeypatch.setenv("HSP_ES__PASSWORD", "other-" + SECRET)
    monkeypatch.setenv("HSP_RERANKER__URL", f"http://rr:{RERANK_SECRET}@127.0.0.1:8088")
    data = json.dumps(redacted_settings(load_settings()))
    assert SECRET not in data and RERANK_SECRET not in data
    assert "https://***@a:9200,https://***@b:9200" in data and "http://***@127.0.0.1:8088" in data


def test_log_lines_are_redacted_on_every_handler() -> None:
    stream = io.StringIO()
    logger = logging.getLogger("hsp-test-redaction")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    try:
        output.redact_logs(logger)
        logger.warning("connecting to %s", f"https://elastic:{SECRET}@host:9200")
        try:
            raise ConnectionError(f"no answer from http://elastic:{SECRET}@host:9200")
        except ConnectionError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    assert SECRET not in stream.getvalue() and "https://***@host:9200" in stream.getvalue()
    assert "no answer from http://***@host:9200" in stream.getvalue()


# ------------------------------------------------------------- the URL's scheme against the node's


def test_http_url_to_a_tls_node_says_it_speaks_tls(self_signed_es: Canned, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    url = self_signed_es.url.replace("https://", "http://")
    port = url.rsplit(":", 1)[1]
    with pytest.raises(SchemeMismatch) as info:
        cluster_info(EngineClient(ClusterSettings(url=url, max_retries=3)))
    exc = info.value
    assert exc.speaks_tls and exc.node == f"127.0.0.1:{port}" and exc.use == f"https://127.0.0.1:{port}"
    assert isinstance(exc, TlsFailure | ClusterUnavailable) and exit_code(exc) == 3
    assert self_signed_es.connections == 2  # the request (not retried) and the TLS probe
    monkeypatch.setenv("HSP_ES_URL", url)
    assert main(["index", "status"]) == 3
    err = printed(capsys)
    assert err.count("\n") == 1 and "Is a node running?" not in err
    assert err.startswith(f"error: the node at 127.0.0.1:{port} speaks TLS (https), but HSP_ES_URL says http://. "
                          f"Use https://127.0.0.1:{port} in HSP_ES_URL")


def test_doctor_names_the_scheme_the_node_speaks(self_signed_es: Canned, fake_es: Canned,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from hybridsearch import doctor

    for url, speaks, use in ((self_signed_es.url.replace("https://", "http://"), "speaks TLS", "https://"),
                             (fake_es.url.replace("http://", "https://"), "speaks plain HTTP", "http://")):
        monkeypatch.setenv("HSP_ES_URL", url)
        reachable = doctor.run_checks(load_settings(), models=False, reranker=False)[0]
        assert reachable.status == "FAIL" and speaks in reachable.detail
        assert reachable.fix is not None and reachable.fix.startswith(f"Use {use}127.0.0.1:")
        assert "start a node" not in reachable.fix


def test_async_and_opensearch_clients_say_it_too(self_signed_es: Canned) -> None:
    url = self_signed_es.url.replace("https://", "http://")

    async def health() -> None:
        es = AsyncEngineClient(ClusterSettings(url=url, max_retries=3), EngineInfo("elasticsearch"))
        try:
            await es.send(request.get_alias("any"))
        finally:
            await es.close()

    with pytest.raises(SchemeMismatch, match="speaks TLS"):
        asyncio.run(health())
    with pytest.raises(SchemeMismatch, match="speaks TLS"):
        EngineClient(ClusterSettings(url=url, max_retries=3, engine="opensearch")).send(request.cluster_health())


def test_a_port_nobody_listens_on_is_not_probed(monkeypatch: pytest.MonkeyPatch) -> None:
    probed: list[Any] = []
    monkeypatch.setattr(engine_client, "speaks", lambda *a, **k: probed.append(a) or False)
    with pytest.raises(ClusterUnavailable) as info:
        cluster_info(EngineClient(ClusterSettings(url=f"http://127.0.0.1:{dead_port()}", max_retries=0)))
    assert not isinstance(info.value, SchemeMismatch) and "Is a node running?" in str(info.value)
    assert probed == []


# -------------------------------------------------------------------------------- engine detection


@pytest.fixture
def zip_node() -> Iterator[Canned]:
    """A stand-in answering like the Elasticsearch integ-test zip: ``GET /`` is 405, ``_nodes/_local`` names the
    version."""
    canned = Canned(status=200, body={"nodes": {"n1": {"version": "9.3.2"}}}, paths={"/": (405, {
        "error": "Incorrect HTTP method for uri [/] and method [GET], allowed: [HEAD]", "status": 405})})
    yield from serve(canned, None)


def test_detection_on_a_node_without_get_root_asks_its_nodes(zip_node: Canned) -> None:
    cfg = ClusterSettings(url=zip_node.url)
    info = EngineClient(cfg).engine
    assert (info.kind, info.version) == ("elasticsearch", "9.3.2")
    assert zip_node.requests == [("GET", "/"), ("GET", "/_nodes/_local?filter_path=nodes.*.version")]
