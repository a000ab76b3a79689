"""How ``hsp`` prints errors: as text (never rich markup), in a few lines, causes only with --verbose."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import pytest

from hybridsearch.cli import index as cli_index
from hybridsearch.cli import ops as cli_ops
from hybridsearch.cli.main import exit_code, main
from hybridsearch.errors import ClusterError, ConfigError
from hybridsearch.settings import Settings

ES_SAYS = ("action [indices:admin/get] is unauthorized for user [bob] with effective roles [] on indices "
           "[hsp-chunks], this action is granted by the index privileges [view_index_metadata,manage,all] "
           "for REST request [/_cluster/health] :fire: [bold red]not markup[/]")


pytestmark = pytest.mark.usefixtures("restore_client_log_levels")


def _raising(exc: Exception) -> Callable[[argparse.Namespace, Settings], int]:
    def handler(args: argparse.Namespace, settings: Settings) -> int:
        raise exc
    return handler


def test_bracketed_error_text_is_printed_in_full(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli_index, "cmd_status", _raising(ClusterError(ES_SAYS)))
    assert main(["index", "status"]) == exit_code(ClusterError)
    err = capsys.readouterr().err
    assert err == f"error: {ES_SAYS}\n"


def test_cli_filter_that_looks_like_markup_is_a_clean_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["search", "x", "--filter", "[/x]=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: invalid filter '[/x]=1': write field=value")
    assert "Traceback" not in err


def test_long_messages_are_cut_to_a_few_lines_unless_verbose(monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.cli.output import MAX_ERROR_LINES

    message = "\n".join(f"line {i} [x]" for i in range(20))
    try:
        raise ConfigError(message) from KeyError("the [cause]")
    except ConfigError as exc:
        error = exc
    monkeypatch.setattr(cli_index, "cmd_status", _raising(error))
    assert main(["index", "status"]) == 2
    short = capsys.readouterr().err.splitlines()
    assert short[:MAX_ERROR_LINES] == ["error: line 0 [x]", *(f"line {i} [x]" for i in range(1, MAX_ERROR_LINES))]
    assert len(short) == MAX_ERROR_LINES + 1 and "--verbose" in short[-1]
    assert "the [cause]" not in "\n".join(short)
    assert main(["-v", "index", "status"]) == 2
    full = capsys.readouterr().err
    assert "line 19 [x]" in full
    assert "caused by builtins.KeyError: 'the [cause]'" in full


def test_doctor_table_shows_bracketed_details(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch import doctor
    from hybridsearch.cli.output import console

    checks = [doctor.Check("cluster", "reachable", "FAIL", "user [x] for REST request [/_cluster/health]",
                           "set [bold]HSP_ES__PASSWORD[/]")]
    monkeypatch.setattr(doctor, "run_checks", lambda *a, **kw: checks)
    monkeypatch.setattr(cli_ops, "console", console(width=300))
    assert main(["doctor", "--no-models", "--no-reranker"]) == 1
    out = capsys.readouterr().out
    assert "user [x] for REST request [/_cluster/health]" in out
    assert "set [bold]HSP_ES__PASSWORD[/]" in out
    assert "1 FAIL — not healthy" in out
    assert main(["doctor", "--json", "--no-models", "--no-reranker"]) == 1
    assert json.loads(capsys.readouterr().out)[0]["detail"] == checks[0].detail


def test_search_result_text_is_not_markup(capsys: pytest.CaptureFixture[str]) -> None:
    from hybridsearch.cli.output import console
    from hybridsearch.cli.search import print_result
    from hybridsearch.query.results import SearchResult

    result = SearchResult.model_validate({
        "query": "[/q]", "mode": "bm25", "index": "idx[1]", "k": 10, "hits": [], "candidates": 0, "reranked": False,
        "rerank_outcome": "failed", "rerank_reason": "service said [/rerank] 503", "truncated_query": True, "page": 1,
        "timings": {"embed_ms": 0, "search_ms": 1, "fusion_ms": 0, "rerank_ms": 0, "total_ms": 1}})
    print_result(console(width=300), result)
    out = capsys.readouterr().out
    assert "» [/q]" in out and "bm25 search of idx[1]: 0 hits" in out and "service said [/rerank] 503" in out
