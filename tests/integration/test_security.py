"""Teams on a secured node (``ops/es-local.sh start --secure``): HTTP over TLS, file-realm users holding the
roles of ops/security/roles.yml, the file docs/operations.md shows.

Each team can do everything for its own prefix and nothing for the other's, and nothing on the other's
side changes when it tries; the read-only searcher can search and see ``hsp index status`` but not write;
a wrong password, a missing or wrong CA and a wrong API key each get one line naming the setting to fix.
The node's users (team-a, team-b, searcher-a) are granted ``team-a-*`` / ``team-b-*``, so each test works
in ``team-a-<uuid>`` / ``team-b-<uuid>`` prefixes. Needs HSP_TEST_SECURITY_ENV (see conftest.security_env).
"""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from corpora import TEAM_A, TEAM_B, docs, seen
from hybridsearch import SearchClient
from hybridsearch.cli.main import main
from hybridsearch.doctor import check_access
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import AccessDenied, ClusterError
from hybridsearch.index.versions import create_version, drop_version, index_status, rollback
from hybridsearch.ingest.commit import delete_documents
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.migrate import migrate
from hybridsearch.settings import Settings, load_settings

USERS = {"team-a": "HSP_TEST_PASSWORD_TEAM_A", "team-b": "HSP_TEST_PASSWORD_TEAM_B",
         "searcher-a": "HSP_TEST_PASSWORD_SEARCHER_A"}


def as_user(sec: dict[str, str], user: str, prefix: str, tmp: Path, **query: Any) -> Settings:
    """Settings for ``user`` of the secured node, working in ``prefix``."""
    return load_settings(es_url=sec["HSP_ES_URL"],
                         es={"username": user, "password": sec[USERS[user]], "ca_certs": sec["HSP_ES__CA_CERTS"]},
                         index={"prefix": prefix}, query={"log_queries": False, **query},
                         ingest={"dead_letter_dir": tmp / "dead-letter"})


@pytest.fixture()
def prefixes(admin: EngineClient) -> Iterator[tuple[str, str]]:
    """A fresh (team-a-…, team-b-…) pair of prefixes, deleted afterwards by the superuser."""
    tag = uuid.uuid4().hex[:8]
    pair = (f"team-a-{tag}", f"team-b-{tag}")
    yield pair
    for p in pair:
        admin.send(request.delete_index(f"{p}-*", expand_wildcards="all"))


@pytest.fixture(scope="module")
def admin(security_env: dict[str, str]) -> Iterator[EngineClient]:
    """The superuser of the secured node (from its security.env, whatever HSP_ES_URL says)."""
    s = security_env
    client = EngineClient(load_settings(es_url=s["HSP_ES_URL"], es={
        "username": s["HSP_ES__USERNAME"], "password": s["HSP_ES__PASSWORD"], "ca_certs": s["HSP_ES__CA_CERTS"]}).es)
    yield client
    client.close()


def snapshot(admin: EngineClient, prefix: str) -> dict[str, Any]:
    """Everything of ``prefix`` another team could change: indices (settings, mappings, aliases), their
    document counts, and any index template whose name or patterns start with the prefix."""
    admin.send(request.refresh(f"{prefix}-*", expand_wildcards="all"))
    indices = admin.send(request.get_index(f"{prefix}-*", expand_wildcards="all"))
    every = admin.send(request.Request("GET", "/_index_template", absent={"index_templates": []}))
    templates = [t for t in every["index_templates"]
                 if t["name"].startswith(prefix) or any(p.startswith(prefix)
                                                       for p in t["index_template"]["index_patterns"])]
    return {"indices": indices, "counts": {n: admin.send(request.count(n))["count"] for n in indices},
            "templates": templates}


def use_cli_as(monkeypatch: pytest.MonkeyPatch, sec: dict[str, str], user: str | None, prefix: str,
               **env: str) -> None:
    """Environment for an in-process ``hsp`` run as ``user`` (None: no user) in ``prefix``."""
    for name in ("HSP_ES__API_KEY", "HSP_ES__USERNAME", "HSP_ES__PASSWORD"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HSP_ES_URL", sec["HSP_ES_URL"])
    monkeypatch.setenv("HSP_ES__CA_CERTS", sec["HSP_ES__CA_CERTS"])
    if user is not None:
        monkeypatch.setenv("HSP_ES__USERNAME", user)
        monkeypatch.setenv("HSP_ES__PASSWORD", sec[USERS[user]])
    monkeypatch.setenv("HSP_INDEX__PREFIX", prefix)
    monkeypatch.setenv("HSP_QUERY__LOG_QUERIES", "false")
    monkeypatch.setenv("HSP_ES__MAX_RETRIES", "0")
    monkeypatch.setenv("COLUMNS", "1000")  # one message, one line: no wrapping
    for name, value in env.items():
        if value:
            monkeypatch.setenv(name, value)
        else:
            monkeypatch.delenv(name, raising=False)


# --------------------------------------------------------------------------------------------- teams

def test_team_credentials_change_nothing_of_another_team(security_env: dict[str, str], admin: EngineClient,
                                                         prefixes: tuple[str, str], embedder: Embedder,
                                                         tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    sec, (_, b_prefix) = security_env, prefixes
    b = as_user(sec, "team-b", b_prefix, tmp_path)
    assert run_ingest(docs(TEAM_B), b, es=EngineClient(b.es), embedder=embedder).failed == 0
    before = snapshot(admin, b_prefix)
    assert before["indices"] and before["counts"][b.index.versioned(1)] == 3

    # team A's credentials pointed at team B's prefix, asking for another shard count
    a_on_b = as_user(sec, "team-a", b_prefix, tmp_path).model_copy(
        update={"index": b.index.model_copy(update={"shards": 3})})
    a_es = EngineClient(a_on_b.es)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "note.txt").write_text("Team A writes where it must not.", encoding="utf-8")
    use_cli_as(monkeypatch, sec, "team-a", b_prefix, HSP_INDEX__SHARDS="3")
    capsys.readouterr()
    assert main(["ingest", str(tmp_path / "src"), "--no-progress"]) == 3
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "'team-a' may not write to prefix" in err and f"{b_prefix}-chunks*" in err and "create_index" in err
    assert "nothing was written" in err and "HSP_INDEX__PREFIX" in err

    with pytest.raises(AccessDenied) as denied:
        run_ingest(docs(TEAM_A), a_on_b, es=a_es, embedder=embedder)
    assert denied.value.user == "team-a" and set(denied.value.missing) >= {"create_index", "write", "manage"}
    with pytest.raises(AccessDenied):
        create_version(a_es, a_on_b)
    with pytest.raises(AccessDenied):
        migrate(a_es, a_on_b, a_on_b, embedder=embedder)
    for attempt in (lambda: rollback(a_es, a_on_b.index, 1),
                    lambda: drop_version(a_es, a_on_b.index, 1),
                    lambda: delete_documents(["recipes"], a_on_b, es=a_es)):
        with pytest.raises(ClusterError, match=r"403|may not"):
            attempt()
    # searching: EngineClient hides B's alias from A (its lookup answers 404), or refuses (403)
    with SearchClient(a_es, a_on_b, embedder=embedder) as client, pytest.raises(ClusterError,
                                                                                match=r"403|does not exist"):
        client.search("sourdough", rerank=False)
    try:
        assert index_status(a_es, a_on_b.index).indices == []  # B's versions stay invisible to A...
    except ClusterError as exc:
        assert "403" in str(exc)  # ...or the status is refused outright

    assert snapshot(admin, b_prefix) == before  # nothing of team B changed
    with SearchClient(EngineClient(b.es), b, embedder=embedder) as client:
        assert ("recipes", "Sourdough") in seen(client, "sourdough starter rye flour")


def test_a_team_role_is_enough_for_everything_on_its_own_prefix(
        security_env: dict[str, str], admin: EngineClient, prefixes: tuple[str, str], embedder: Embedder,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sec, (a_prefix, b_prefix) = security_env, prefixes
    b = as_user(sec, "team-b", b_prefix, tmp_path)
    run_ingest(docs(TEAM_B), b, es=EngineClient(b.es), embedder=embedder)
    before_b = snapshot(admin, b_prefix)

    a = as_user(sec, "team-a", a_prefix, tmp_path)
    a_es = EngineClient(a.es)
    result = run_ingest(docs(TEAM_A), a, es=a_es, embedder=embedder)
    assert result.failed == 0 and result.documents == 3
    assert admin.send(request.count(a.index.ingest_runs))["count"] == 1  # the run was recorded
    with SearchClient(a_es, a, embedder=embedder, log_queries=True) as client:
        assert ("handbook", "Expense policy") in seen(client, "expense policy train tickets")
        assert client.query_log is not None and client.query_log.flush(10) and client.query_log.written == 1
    assert check_access(a_es, a.index).status == "OK" and "may ingest" in check_access(a_es, a.index).detail

    hnsw = a.model_copy(update={"index": a.index.model_copy(update={"index_options": "hnsw"})})
    moved = migrate(a_es, a, hnsw, embedder=embedder)
    assert moved.swapped and moved.target == a.index.versioned(2) and moved.chunks == 3
    assert rollback(a_es, a.index) == (a.index.versioned(2), a.index.versioned(1))
    assert drop_version(a_es, a.index, 2) == a.index.versioned(2)
    assert delete_documents(["oncall"], a, es=a_es) >= 1

    use_cli_as(monkeypatch, sec, "team-a", a_prefix)
    capsys.readouterr()
    assert main(["index", "status", "--json"]) == 0
    status = json.loads(capsys.readouterr().out)
    assert [(r["version"], r["live"], r["chunks"]) for r in status["indices"]] == [(1, True, 2)]
    assert snapshot(admin, b_prefix) == before_b  # and team B saw none of it


# --------------------------------------------------------------------------------------------- read-only

def test_read_only_searcher_searches_and_sees_status_but_cannot_write(
        security_env: dict[str, str], admin: EngineClient, prefixes: tuple[str, str], embedder: Embedder,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    sec, (a_prefix, _) = security_env, prefixes
    a = as_user(sec, "team-a", a_prefix, tmp_path)
    run_ingest(docs(TEAM_A), a, es=EngineClient(a.es), embedder=embedder)
    before = snapshot(admin, a_prefix)

    reader = as_user(sec, "searcher-a", a_prefix, tmp_path, log_queries=True)
    r_es = EngineClient(reader.es)
    with SearchClient(r_es, reader, embedder=embedder) as client:
        assert ("oncall", "On-call rota") in seen(client, "pager handover monday")
        assert client.query_log is not None and client.query_log.flush(10)
        assert client.query_log.written == 1 and client.query_log.failed == 0  # create_doc on its query log
    access = check_access(r_es, reader.index)
    assert access.status == "OK" and "read-only" in access.detail

    use_cli_as(monkeypatch, sec, "searcher-a", a_prefix)
    capsys.readouterr()
    assert main(["index", "status"]) == 0  # _cat/indices: index privilege monitor
    out = capsys.readouterr().out
    assert "v1" in out and a.index.versioned(1) in out

    with pytest.raises(AccessDenied, match=r"'searcher-a' may not write to prefix .*create_index"):
        run_ingest(docs(TEAM_B), reader, es=r_es, embedder=embedder)
    with pytest.raises(AccessDenied):
        create_version(r_es, reader)
    with pytest.raises(AccessDenied):
        drop_version(r_es, reader.index, 2)
    with pytest.raises(ClusterError):
        delete_documents(["handbook"], reader, es=r_es)
    after = snapshot(admin, a_prefix)
    log = reader.index.query_log
    assert after["counts"].pop(log) == before["counts"].pop(log) + 1  # the one logged search, nothing else
    assert after == before


# --------------------------------------------------------------------------------------------- credentials

BAD = {
    "wrong password": ({"HSP_ES__PASSWORD": "not-the-password"}, 3, "HSP_ES__PASSWORD"),
    "no CA given": ({"HSP_ES__CA_CERTS": ""}, 3, "HSP_ES__CA_CERTS"),
    "missing CA file": ({"HSP_ES__CA_CERTS": "/nonexistent/hsp-ca.crt"}, 2, "HSP_ES__CA_CERTS"),
    "wrong API key": ({"HSP_ES__API_KEY": base64.b64encode(b"no-such-id:no-such-key").decode()}, 3,
                      "HSP_ES__API_KEY"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_credentials_or_certificates_get_one_line_naming_the_setting(
        case: str, security_env: dict[str, str], monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    env, code, setting = BAD[case]
    use_cli_as(monkeypatch, security_env, "team-a", "team-a-x", **env)
    capsys.readouterr()
    assert main(["index", "status"]) == code
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert setting in err, err
