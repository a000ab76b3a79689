"""``hsp`` loads only the module of the command it runs, and its command table matches what the modules register."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from hybridsearch.cli.main import COMMAND_MODULES, COMMANDS, build_parser


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_the_command_table_names_what_each_module_registers(module: str) -> None:
    added: list[str] = []

    def add(name: str, *handler: object, **options: object) -> argparse.ArgumentParser:
        added.append(name)
        return argparse.ArgumentParser()

    importlib.import_module(f"hybridsearch.cli.{module}").register(add)
    assert set(added) == {command for command, owner in COMMANDS.items() if owner == module}


def _loaded(argv: list[str]) -> set[str]:
    """The hybridsearch.cli command modules a fresh interpreter has loaded after building the parser for argv."""
    code = ("import sys; from hybridsearch.cli.main import build_parser; build_parser(sys.argv[1:]); "
            "print(' '.join(m for m in sys.modules if m.startswith('hybridsearch.')))")
    out = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, check=True).stdout
    return set(out.split())


def test_a_search_loads_only_the_search_command() -> None:
    loaded = _loaded(["-v", "search", "bees", "--mode", "bm25"])
    assert "hybridsearch.cli.search" in loaded
    assert not {f"hybridsearch.cli.{m}" for m in COMMAND_MODULES if m != "search"} & loaded
    assert "hybridsearch.eval.report" not in loaded and "hybridsearch.training" not in loaded


def test_help_and_unknown_commands_load_every_command() -> None:
    for argv in ([], ["--help"], ["no-such-command"]):
        assert {f"hybridsearch.cli.{m}" for m in COMMAND_MODULES} <= _loaded(argv)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_answers_help_with_its_own_module_alone(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        build_parser([command]).parse_args([command, "--help"])
    assert stop.value.code == 0 and f"usage: hsp {command}" in capsys.readouterr().out


def test_ingest_options_keep_an_unset_model_unset_so_ingestion_follows_the_index() -> None:
    from hybridsearch.cli.ingest import apply_options
    from hybridsearch.settings import load_settings

    args = build_parser().parse_args(["ingest", "docs/", "--backend", "onnx", "--max-tokens", "120"])
    settings = apply_options(args, load_settings(es_url="http://127.0.0.1:9200"))
    assert (settings.embedding.backend, settings.chunking.max_tokens) == ("onnx", 120)
    assert "model" not in settings.embedding.model_fields_set  # follow_index uses the index's own model
    named = apply_options(args, load_settings(es_url="http://127.0.0.1:9200", embedding={"model": "m"}))
    assert named.embedding.model == "m" and "model" in named.embedding.model_fields_set
