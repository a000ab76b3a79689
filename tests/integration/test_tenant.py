"""Several teams on one cluster: prefixes keep their indices apart, tenants share one index safely,
and an API key limited to a prefix is enough to ingest and search (where the cluster can create API keys:
the integ-test node cannot, see prefix_api_key; tests/integration/test_security.py covers the same roles
with file-realm users)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from corpora import TEAM_A, TEAM_B, docs, seen
from hybridsearch import SearchClient
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import API_ERRORS, EngineClient, Request, request, status_of
from hybridsearch.errors import AccessDenied
from hybridsearch.index.versions import index_status, read_alias
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.migrate import migrate
from hybridsearch.settings import Settings, load_settings

ROLES = Path(__file__).resolve().parents[2] / "ops" / "security" / "roles.yml"

def tenant(settings: Settings, name: str | None) -> Settings:
    return settings.model_copy(update={"index": settings.index.model_copy(update={"tenant": name})})


def test_two_tenants_in_one_index_see_only_their_own_documents(es: EngineClient, settings: Settings,
                                                                 embedder: Embedder) -> None:
    a, b = tenant(settings, "team-a"), tenant(settings, "team-b")
    assert run_ingest(docs(TEAM_A), a, es=es, embedder=embedder).failed == 0
    assert run_ingest(docs(TEAM_B), b, es=es, embedder=embedder).failed == 0
    index = sorted(read_alias(es, settings.index.alias))
    assert len(index) == 1 and es.send(request.count(index[0]))["count"] == 6  # one index holds both teams

    titles_a = {t for t, _ in TEAM_A.values()}
    titles_b = {t for t, _ in TEAM_B.values()}
    with SearchClient(es, a, embedder=embedder) as ca, SearchClient(es, b, embedder=embedder) as cb:
        for query in ("coffee", "sourdough starter rye flour", "pager handover monday", "team"):
            for mode in ("hybrid", "bm25", "dense"):
                got_a = {t for _, t in seen(ca, query, mode=mode)}
                got_b = {t for _, t in seen(cb, query, mode=mode)}
                assert got_a <= titles_a and got_b <= titles_b, (query, mode, got_a, got_b)
        # the same doc_id in both tenants stays two documents
        assert ("shared-id", "Coffee machine") in seen(ca, "coffee")
        assert ("shared-id", "Coffee beans") in seen(cb, "coffee")
        assert seen(ca, "sourdough starter rye flour", mode="bm25") == set()  # team B's words, not A's hits
        # a filter cannot widen the tenant: asking for the other tenant yields nothing
        assert seen(ca, "coffee", filters={"tenant": "team-b"}) == set()

    # without a tenant the client sees everything (an operator's view; collapse off, since collapsing by
    # doc_id would fold the two tenants' "shared-id" documents into one)
    operator = tenant(settings, None)
    operator = operator.model_copy(update={"query": operator.query.model_copy(update={"collapse": False})})
    with SearchClient(es, operator, embedder=embedder) as admin:
        assert {t for _, t in seen(admin, "coffee")} >= {"Coffee machine", "Coffee beans"}

    # a migration carries the tenant of every chunk along
    new = settings.model_copy(update={"index": settings.index.model_copy(update={"index_options": "hnsw"})})
    migrate(es, settings, new, embedder=embedder)
    with SearchClient(es, tenant(new, "team-b"), embedder=embedder) as cb2:
        assert {t for _, t in seen(cb2, "coffee team")} <= titles_b
        assert ("shared-id", "Coffee beans") in seen(cb2, "coffee")


def test_prefixes_keep_teams_apart(es: EngineClient, settings: Settings, embedder: Embedder) -> None:
    other = settings.model_copy(update={"index": settings.index.model_copy(
        update={"prefix": f"{settings.index.prefix}-x"})})
    try:
        run_ingest(docs(TEAM_A), settings, es=es, embedder=embedder)
        run_ingest(docs(TEAM_B), other, es=es, embedder=embedder)
        for s, corpus in ((settings, TEAM_A), (other, TEAM_B)):
            names = {n for n in es.send(request.get_index(f"{s.index.prefix}-*")) if not n.startswith(
                f"{s.index.prefix}-x-") or s is other}
            assert s.index.versioned(1) in names and s.index.ingest_runs in names
            assert s.index.query_log in names
            with SearchClient(es, s, embedder=embedder) as client:
                assert {t for _, t in seen(client, "coffee team")} <= {t for t, _ in corpus.values()}
        # the status of one prefix lists only its own versions
        assert [r.name for r in index_status(es, settings.index).indices] == [settings.index.versioned(1)]
    finally:
        es.send(request.delete_index(f"{other.index.prefix}-*", expand_wildcards="all"))


# --------------------------------------------------------------------------------------------- API keys

def security_enabled(es: EngineClient) -> tuple[bool, str]:
    """Whether the cluster enforces security, and what the answer was (``_security/_authenticate`` works
    exactly when security is on; ``_xpack/usage`` fails on the integ-test zip either way)."""
    if es.engine.kind != "elasticsearch":
        return False, f"{es.engine.name} has no Elasticsearch security APIs"
    try:
        who = es.send(Request("GET", "/_security/_authenticate"))
    except API_ERRORS as exc:
        return False, f"xpack.security.enabled is false here (_security/_authenticate: HTTP {status_of(exc)})"
    return True, f"security enabled, authenticated as {who.get('username')}"


def prefix_role(prefix: str) -> dict[str, Any]:
    """The role ops/security/roles.yml (shown in docs/operations.md) gives team-a, moved to ``<prefix>-*``."""
    role: dict[str, Any] = yaml.safe_load(ROLES.read_text(encoding="utf-8"))["hsp-team-a"]
    for grant in role["indices"]:
        grant["names"] = [n.replace("team-a-", f"{prefix}-") for n in grant["names"]]
    return role


@pytest.fixture()
def prefix_api_key(es: EngineClient, settings: Settings) -> Iterator[str]:
    enabled, why = security_enabled(es)
    if not enabled:
        pytest.skip(f"cluster security is off, so API keys cannot be restricted: {why}")
    try:
        key = es.send(Request("POST", "/_security/api_key", body={
            "name": f"hsp-test-{uuid.uuid4().hex[:8]}", "expiration": "1h",
            "role_descriptors": {"team": prefix_role(settings.index.prefix)}}))
    except API_ERRORS as exc:
        if status_of(exc) == 400 and "pattern_capture" in str(exc):
            pytest.skip("this node cannot create API keys: POST /_security/api_key answered 400 Unknown filter "
                        "type [pattern_capture] (the integ-test zip lacks analysis-common, which the .security "
                        "index needs); the same role descriptors are exercised as file-realm users by "
                        "test_security.py, and a wrong API key's 401 by test_security.py too")
        raise
    yield str(key["encoded"])
    es.send(Request("DELETE", "/_security/api_key", body={"ids": [key["id"]]}))


def test_api_key_restricted_to_the_prefix_is_enough(es: EngineClient, settings: Settings, embedder: Embedder,
                                                     prefix_api_key: str) -> None:
    team = load_settings(es_url=settings.es.url, es={"api_key": prefix_api_key},
                         index={"prefix": settings.index.prefix}, query={"log_queries": False},
                         ingest={"dead_letter_dir": str(settings.ingest.dead_letter_dir)})
    team_es = EngineClient(team.es)
    result = run_ingest(docs(TEAM_A), team, es=team_es, embedder=embedder)
    assert result.failed == 0 and result.documents == 3
    with SearchClient(team_es, team, embedder=embedder) as client:
        assert seen(client, "expense policy train tickets")
    assert index_status(team_es, team.index).indices[0].chunks == 3
    # ...and nothing outside the prefix
    outsider = team.model_copy(update={"index": team.index.model_copy(update={"prefix": f"x{uuid.uuid4().hex[:6]}"})})
    try:
        with pytest.raises(AccessDenied, match=r"missing index privileges"):
            run_ingest(docs(TEAM_B), outsider, es=team_es, embedder=embedder)
    finally:
        es.send(request.delete_index(f"{outsider.index.prefix}-*", expand_wildcards="all"))
