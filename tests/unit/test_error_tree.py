"""The error tree as data: every error carries ``problem`` and ``fix``, the message is rendered from them once,
``hsp doctor`` shows the error's own fix, and every error class has one documented exit code."""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from hybridsearch import errors
from hybridsearch.cli.main import EXIT_CODES, exit_code, main
from hybridsearch.errors import HybridSearchError
from standin import Canned

DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"

#: one instance of every class of the tree, built the way the package builds it
SAMPLES: dict[type[HybridSearchError], Callable[[], HybridSearchError]] = {
    errors.HybridSearchError: lambda: errors.HybridSearchError("something failed", fix="Do the other thing"),
    errors.ConfigError: lambda: errors.ConfigError("HSP_INDEX__SHARDS must be >= 1, got 0",
                                                   fix="Set HSP_INDEX__SHARDS to 1 or more"),
    errors.QueryError: lambda: errors.QueryError("the query is empty"),
    errors.ClusterError: lambda: errors.ClusterError("search failed with HTTP 500: boom"),
    errors.ClusterUnavailable: lambda: errors.ClusterUnavailable("the cluster did not answer the search",
                                                                 fix="Is a node running?"),
    errors.TlsFailure: lambda: errors.TlsFailure("https://u:secret@es:9200", "certificate verify failed",
                                                 untrusted=True),
    errors.SchemeMismatch: lambda: errors.SchemeMismatch("es:9200", speaks_tls=True, use="https://es:9200"),
    errors.AuthenticationFailed: lambda: errors.AuthenticationFailed("cluster health", "security_exception: no"),
    errors.AccessDenied: lambda: errors.AccessDenied("get alias hsp-chunks", es_action="indices:admin/aliases/get",
                                                     resource="hsp-chunks", privileges=("manage", "all")),
    errors.IndexNotFound: lambda: errors.IndexNotFound("alias hsp-chunks does not exist",
                                                       fix="Run `hsp index create` first"),
    errors.IndexMismatch: lambda: errors.IndexMismatch("index hsp-chunks-v1 does not fit the settings",
                                                       fix="Use matching settings", index="hsp-chunks-v1"),
    errors.AliasConflict: lambda: errors.AliasConflict("hsp-chunks points at 2 indices", alias="hsp-chunks",
                                                       indices=("a", "b"), fix="Move it to one of them"),
    errors.IndexBlocked: lambda: errors.IndexBlocked("write to hsp-chunks-v1: blocked by index.blocks.write",
                                                     index="hsp-chunks-v1", block="index.blocks.write",
                                                     fix="PUT hsp-chunks-v1/_settings"),
    errors.ModelError: lambda: errors.ModelError("cannot load model x", fix="Set HSP_EMBEDDING__MODEL"),
    errors.IngestError: lambda: errors.IngestError("ingest run r1 failed unexpectedly: RuntimeError: x",
                                                   fix="Re-run it"),
    errors.IngestLocked: lambda: errors.IngestLocked("run r0 holds the lease", fix="Wait for it", holder="r0",
                                                     host="h", pid=1, shard=None, heartbeat_age_s=2.0),
    errors.LeaseLost: lambda: errors.LeaseLost("the lease of run r1 was taken over"),
    errors.RerankerError: lambda: errors.RerankerError("the reranker timed out"),
    errors.RerankerModelError: lambda: errors.RerankerModelError("cannot load cross-encoder x",
                                                                 fix="Set HSP_RERANKER__MODEL"),
}


def tree() -> list[type[HybridSearchError]]:
    """Every error class :mod:`hybridsearch.errors` defines."""
    return [c for _, c in inspect.getmembers(errors, inspect.isclass)
            if issubclass(c, HybridSearchError) and c.__module__ == errors.__name__]


def documented_codes() -> dict[int, str]:
    """Exit code -> meaning, from the table in docs/operations.md ("Errors and exit codes")."""
    section = DOCS.read_text(encoding="utf-8").split("## Errors and exit codes", 1)[1].split("\n## ", 1)[0]
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^\| (\d+) \| (.+) \|$", section, re.M)}


def test_every_class_of_the_tree_has_a_sample() -> None:
    assert set(tree()) == set(SAMPLES)


@pytest.mark.parametrize("cls", list(SAMPLES), ids=lambda c: c.__name__)
def test_message_holds_problem_and_fix_once(cls: type[HybridSearchError]) -> None:
    exc = SAMPLES[cls]()
    assert type(exc) is cls and exc.problem
    message = str(exc)
    assert message.count(exc.problem) == 1 and message.startswith(exc.problem)
    if exc.fix is not None:
        assert message.count(exc.fix) == 1 and message.endswith(exc.fix)
        assert exc.fix not in exc.problem
    assert message == HybridSearchError.render(exc.problem, exc.fix)
    assert "\n" not in message and "[/" not in message  # one line, plain text


@pytest.mark.parametrize("exc", [
    errors.AuthenticationFailed("cluster health"),
    errors.AccessDenied("get alias hsp-chunks"),
    errors.AccessDenied("write to prefix team-b", user="team-a",
                        missing={"write": ["team-b-chunks*"], "create_index": ["team-b-chunks*", "team-b-query-log"]}),
    errors.TlsFailure("https://es:9200", "certificate verify failed", untrusted=True),
    errors.TlsFailure("https://es:9200", "wrong version number", untrusted=False),
], ids=["401", "403", "missing", "untrusted", "handshake"])
def test_credential_and_tls_errors_keep_the_fix_out_of_the_problem(exc: HybridSearchError) -> None:
    assert exc.fix is not None
    settings = set(re.findall(r"HSP_\w+", exc.fix))
    assert settings or "HSP_INDEX__PREFIX" in exc.fix
    assert not set(re.findall(r"HSP_\w+", exc.problem))  # what went wrong names no setting: the fix does


def test_access_denied_before_writing_sums_up_what_is_missing() -> None:
    exc = errors.AccessDenied("write to prefix team-b", user="team-a",
                              missing={"write": ["team-b-chunks*"], "create_index": ["team-b-query-log"]})
    assert exc.privileges == ("create_index", "write") and exc.resource == "team-b-chunks*, team-b-query-log"
    assert exc.problem == ("user 'team-a' may not write to prefix team-b: missing index privileges create_index, "
                           "write on team-b-chunks*, team-b-query-log; nothing was written")
    assert exc.status == 403 and exit_code(exc) == 3


def test_the_render_does_not_double_a_full_stop() -> None:
    assert HybridSearchError.render("it failed.", "Retry") == "it failed. Retry"
    assert HybridSearchError.render("it failed", "Retry") == "it failed. Retry"
    assert HybridSearchError.render("it failed", None) == "it failed"


# ----------------------------------------------------------------------------------------------- exit codes


def test_every_error_class_maps_to_a_documented_exit_code() -> None:
    documented = documented_codes()
    assert {0, 1, 2, 3, 4, 5, 6, 130} <= set(documented)
    for cls in tree():
        assert exit_code(cls) in documented, cls.__name__
        assert "exit_code" not in vars(cls), f"{cls.__name__} carries its own exit code: use the table"
    for cls, code in EXIT_CODES.items():  # each code the table names says which classes take it
        assert cls.__name__ in documented[code] or code == 1, (cls.__name__, code)


@pytest.mark.parametrize(("cls", "code"), [
    (errors.QueryError, 2), (errors.SchemeMismatch, 3), (errors.AccessDenied, 3), (errors.IndexBlocked, 3),
    (errors.AliasConflict, 4), (errors.RerankerModelError, 5), (errors.IngestLocked, 6), (errors.IngestError, 1),
    (errors.LeaseLost, 1), (errors.RerankerError, 1),
])
def test_subclasses_take_the_code_of_their_nearest_listed_base(cls: type[HybridSearchError], code: int) -> None:
    assert exit_code(cls) == code and exit_code(SAMPLES[cls]()) == code


# ----------------------------------------------------------------------------------------------- doctor


UNAUTHENTICATED = {"error": {"root_cause": [{"type": "security_exception", "reason": "unable to authenticate"}],
                             "type": "security_exception", "reason": "unable to authenticate"}, "status": 401}


@pytest.mark.usefixtures("restore_client_log_levels")
def test_doctor_shows_an_auth_failure_fix_once(fake_es: Canned, monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("HSP_ES_URL", fake_es.url)
    fake_es.status, fake_es.body = 401, UNAUTHENTICATED
    assert main(["doctor", "--json", "--no-models", "--no-reranker"]) == 1
    out = capsys.readouterr().out
    reachable = json.loads(out)[0]
    fix = errors.AuthenticationFailed("x").fix
    assert reachable["status"] == "FAIL" and reachable["fix"] == fix
    assert reachable["detail"] == "authentication failed for cluster health (HTTP 401: security_exception: unable " \
                                  "to authenticate)"
    assert out.count("HSP_ES__PASSWORD") == 1


# ----------------------------------------------------------------------------------------------- training


def test_a_training_input_error_is_one_line_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """Two judged queries cannot make three folds: a ConfigError naming the fix, not a ValueError traceback."""
    from hybridsearch import engine
    from hybridsearch.training import negatives, reranker
    from hybridsearch.training.negatives import MinedData, PairStats

    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text('{"_id": "d1", "title": "", "text": "x"}\n', encoding="utf-8")
    (root / "queries.jsonl").write_text('{"_id": "a", "text": "query a"}\n{"_id": "b", "text": "query b"}\n',
                                        encoding="utf-8")
    (root / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\na\td1\t1\nb\td1\t1\n", encoding="utf-8")

    class Closeable:
        def close(self) -> None:
            pass

    class NoMiner:
        index = "hsp-chunks-v1"

        def __init__(self, *args: Any) -> None:
            pass

    def mined(*args: Any, **kwargs: Any) -> MinedData:
        return MinedData(train_qids=["a", "b"], val_qids=[], pairs=[], validation=[], stats=PairStats(), seconds=0.0)

    monkeypatch.setattr(engine, "EngineClient", lambda *a, **kw: Closeable())
    monkeypatch.setattr(negatives, "IndexMiner", NoMiner)
    monkeypatch.setattr(reranker, "mine", mined)
    code = main(["train-reranker", str(root), "--out", str(tmp_path / "out"), "--folds", "3", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and "Traceback" not in err and "ValueError" not in err
    assert err.startswith("error: cannot split 2 training queries into 3 folds")
    assert "Pass --folds 2, or --folds 0 to train without k-fold selection" in err
