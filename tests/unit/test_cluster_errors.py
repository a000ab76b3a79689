"""Refusals and TLS failures from a real ``elasticsearch`` client, against a stand-in server (tests/unit/conftest.py).

401 → AuthenticationFailed, 403 → AccessDenied naming the action, an untrusted certificate or a non-TLS
port → TlsFailure raised at once (no retries); each one line from ``hsp``, naming the setting to fix.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from hybridsearch import doctor
from hybridsearch.cli.main import exit_code, main
from hybridsearch.engine import AsyncEngineClient, EngineClient, EngineInfo, cluster_info, request
from hybridsearch.errors import AccessDenied, AuthenticationFailed, ClusterUnavailable, TlsFailure
from hybridsearch.index.versions import read_alias
from hybridsearch.settings import ClusterSettings, load_settings
from standin import Canned

UNAUTHENTICATED = {"error": {"root_cause": [{"type": "security_exception",
                                             "reason": "unable to authenticate user [x] for REST request "
                                                       "[/_cluster/health]"}],
                             "type": "security_exception",
                             "reason": "unable to authenticate user [x] for REST request [/_cluster/health]"},
                   "status": 401}
FORBIDDEN_REASON = ("action [indices:admin/aliases/get] is unauthorized for user [reader] with effective roles "
                    "[hsp_reader] on indices [hsp-chunks], this action is granted by the index privileges "
                    "[view_index_metadata,manage,all]")
FORBIDDEN = {"error": {"root_cause": [{"type": "security_exception", "reason": FORBIDDEN_REASON}],
                       "type": "security_exception", "reason": FORBIDDEN_REASON}, "status": 403}


pytestmark = pytest.mark.usefixtures("restore_client_log_levels")


def test_401_names_the_credential_settings(fake_es: Canned) -> None:
    fake_es.status, fake_es.body = 401, UNAUTHENTICATED
    with pytest.raises(AuthenticationFailed) as info:
        cluster_info(EngineClient(ClusterSettings(url=fake_es.url)))
    exc = info.value
    assert exc.status == 401 and exc.action == "cluster health" and exit_code(exc) == 3
    assert exc.reason == "security_exception: unable to authenticate user [x] for REST request [/_cluster/health]"
    assert str(exc) == ("authentication failed for cluster health (HTTP 401: security_exception: unable to "
                        "authenticate user [x] for REST request [/_cluster/health]). Set HSP_ES__USERNAME and "
                        "HSP_ES__PASSWORD, or HSP_ES__API_KEY, to credentials this cluster accepts")


def test_head_refusals_say_what_was_refused(fake_es: Canned) -> None:
    fake_es.status = 403  # HEAD answers carry no body: the message comes from what we were doing
    es = EngineClient(ClusterSettings(url=fake_es.url))
    with pytest.raises(AccessDenied) as denied:
        read_alias(es, "hsp-chunks")
    assert "None" not in str(denied.value)
    assert str(denied.value).startswith("not allowed: get alias hsp-chunks (HTTP 403). The credentials in "
                                        "HSP_ES__USERNAME or HSP_ES__API_KEY lack the privilege")
    fake_es.status = 401
    with pytest.raises(AuthenticationFailed, match=r"^authentication failed for get alias hsp-chunks \(HTTP 401\)"):
        read_alias(es, "hsp-chunks")


def test_403_body_gives_action_indices_and_privileges(fake_es: Canned) -> None:
    fake_es.status, fake_es.body = 403, FORBIDDEN
    with pytest.raises(AccessDenied) as info:
        cluster_info(EngineClient(ClusterSettings(url=fake_es.url)))
    exc = info.value
    assert (exc.action, exc.es_action, exc.resource) == ("cluster health", "indices:admin/aliases/get", "hsp-chunks")
    assert exc.privileges == ("view_index_metadata", "manage", "all")
    assert str(exc) == ("not allowed: cluster health (indices:admin/aliases/get) on hsp-chunks (HTTP 403). The "
                        "credentials in HSP_ES__USERNAME or HSP_ES__API_KEY lack the privilege: grant one of the "
                        "privileges view_index_metadata, manage, all to their role (docs/operations.md lists what "
                        "each command needs)")


def test_wrong_password_is_one_line_exit_3(fake_es: Canned, monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    fake_es.status, fake_es.body = 401, UNAUTHENTICATED
    monkeypatch.setenv("HSP_ES_URL", fake_es.url)
    assert main(["search", "vitamin d", "--mode", "bm25", "--no-rerank"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "unable to authenticate user [x] for REST request [/_cluster/health]" in err
    assert "HSP_ES__PASSWORD" in err


def test_doctor_gives_the_fix_for_each_kind(fake_es: Canned, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HSP_ES_URL", fake_es.url)
    settings = load_settings()
    fake_es.status, fake_es.body = 401, UNAUTHENTICATED
    reachable = doctor.run_checks(settings, models=False, reranker=False)[0]
    assert reachable.status == "FAIL" and "unable to authenticate user [x]" in reachable.detail
    assert reachable.fix is not None and "HSP_ES__PASSWORD" in reachable.fix and "start a node" not in reachable.fix
    # every cluster check passed, then the index checks are refused (HEAD: no body)
    fake_es.status, fake_es.body = 403, None
    monkeypatch.setattr(doctor, "check_cluster", lambda es: [doctor.Check("cluster", "reachable", "OK", "fine")])
    checks = doctor.run_checks(settings, models=False, reranker=False)
    privileges, alias = checks[1], checks[2]
    assert privileges.name == "privileges" and privileges.status == "FAIL"
    assert privileges.detail == "not allowed: check privileges (HTTP 403)"
    assert alias.status == "FAIL" and alias.detail == "not allowed: get alias hsp-chunks (HTTP 403)"
    for c in (privileges, alias):
        assert c.fix is not None and "lack the privilege" in c.fix and "cluster checks above" not in c.fix


def test_untrusted_certificate_fails_once_naming_ca_certs(self_signed_es: Canned, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str],
                                                          caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("HSP_ES_URL", self_signed_es.url)
    monkeypatch.setenv("HSP_ES__MAX_RETRIES", "3")
    started = time.perf_counter()
    assert main(["index", "status"]) == 3
    assert time.perf_counter() - started < 5
    assert self_signed_es.connections == 1  # not retried
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"error: the TLS certificate of {self_signed_es.url} is not trusted (certificate verify "
                          "failed: self-signed certificate). Set HSP_ES__CA_CERTS to the CA certificate file")
    assert "HSP_ES__VERIFY_CERTS=false" in err
    assert not [r for r in caplog.records if r.name.startswith("elastic_transport")]


def test_async_client_does_not_retry_an_untrusted_certificate(self_signed_es: Canned) -> None:
    async def health() -> None:
        # the engine given, so the request goes through the asyncio node (detection would use a sync one)
        es = AsyncEngineClient(ClusterSettings(url=self_signed_es.url, max_retries=3), EngineInfo("elasticsearch"))
        try:
            await es.send(request.get_alias("any"))
        finally:
            await es.close()

    with pytest.raises(TlsFailure) as info:
        asyncio.run(health())
    assert info.value.untrusted and self_signed_es.connections == 1


def test_https_to_a_plain_http_port_is_not_retried(fake_es: Canned) -> None:
    url = fake_es.url.replace("http://", "https://")
    with pytest.raises(TlsFailure) as info:
        cluster_info(EngineClient(ClusterSettings(url=url, max_retries=3)))
    # one request, not retried, and one plain-HTTP probe that finds out what the node speaks
    assert not info.value.untrusted and fake_es.connections == 2
    assert fake_es.requests == [("HEAD", "/")]  # the probe; the https request never became HTTP
    assert "HSP_ES_URL" in str(info.value) and isinstance(info.value, ClusterUnavailable)
    assert "speaks plain HTTP" in str(info.value) and "Use http://127.0.0.1:" in str(info.value)


def test_client_retry_warnings_only_with_verbose(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HSP_ES_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("HSP_ES__MAX_RETRIES", "1")
    assert main(["index", "status"]) == 3
    assert not [r for r in caplog.records if r.name.startswith("elastic_transport")]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Is a node running?" in err
    assert main(["-v", "index", "status"]) == 3
    assert [r for r in caplog.records if r.name == "elastic_transport.transport" and "Retrying" in r.getMessage()]
