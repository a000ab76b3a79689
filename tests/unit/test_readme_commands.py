"""Every ``hsp`` and ``ops/`` command in the README's shell blocks exists as written.

Each shell line is split as the shell would (``shlex``: quotes, ``#`` comments, ``&&``, ``$(...)``); leading
``VAR=value`` words and ``export`` lines are environment, not commands. Then:

* ``hsp ...``: the command line parses with hsp's own parser as written (every option and value exists), and
  the same line with ``--help`` exits 0;
* ``ops/NAME.py ...`` (with or without ``python``): the script runs with the line's arguments and ``--help``
  and exits 0;
* the shell scripts take no ``--help`` and are mapped explicitly (:data:`SHELL_SCRIPTS`): ``ops/es-local.sh``'s
  subcommand must be one its own usage line lists (it is run with an unknown one, which only prints usage),
  ``ops/demo.sh`` and ``ops/test.sh`` must be executable and parse (``bash -n``);
* any other program must be listed in :data:`OTHER_PROGRAMS`, so a new kind of command is not skipped unseen.

The README's Python blocks run against a node in tests/integration/test_readme.py.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from hybridsearch.cli.main import build_parser, main
from readme_blocks import README, blocks

ROOT = README.parent
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
#: programs of the README that are not this project's: nothing to check here
OTHER_PROGRAMS = {"docker", "eval", "source"}
#: shell scripts without --help: how each is checked instead
SHELL_SCRIPTS = {"ops/es-local.sh": "subcommand in its usage", "ops/demo.sh": "bash -n", "ops/test.sh": "bash -n"}


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]  #: the line's leading VAR=value words
    where: str  #: README line, for messages

    def __str__(self) -> str:
        return f"README.md:{self.where}: {shlex.join(self.argv)}"


def commands_of(words: list[str], where: str) -> Iterator[Command]:
    """The simple commands of one shell line (split at ``&&``, ``||``, ``;``), ``$(...)`` ones included."""
    segment: list[str] = []
    for word in [*words, "&&"]:
        for inner in re.findall(r"\$\((.*?)\)", word):
            yield from commands_of(shlex.split(inner), where)
        if word not in ("&&", "||", ";"):
            segment.append(word)
            continue
        env = []
        while segment and ASSIGNMENT.match(segment[0]):
            key, _, value = segment.pop(0).partition("=")
            env.append((key, value))
        if segment and segment[0] != "export":
            yield Command(tuple(segment), tuple(env), where)
        segment = []


def readme_commands() -> list[Command]:
    found = []
    for block in blocks("bash"):
        for offset, line in enumerate(block.code.splitlines()):
            found.extend(commands_of(shlex.split(line, comments=True), str(block.line + offset)))
    return found


COMMANDS = readme_commands()


def of(kind: str) -> list[Command]:
    def program(c: Command) -> str:
        return c.argv[1] if c.argv[0] == "python" else c.argv[0]
    return [c for c in COMMANDS if {"hsp": program(c) == "hsp", "py": program(c).startswith("ops/")
                                    and program(c).endswith(".py"), "sh": program(c) in SHELL_SCRIPTS,
                                    "other": program(c) in OTHER_PROGRAMS}[kind]]


def test_every_fenced_block_is_read_and_every_command_is_known() -> None:
    assert len(of("hsp")) >= 20 and of("py") and of("sh")  # the parse found the README's commands
    unknown = [str(c) for c in COMMANDS if not any(c in of(k) for k in ("hsp", "py", "sh", "other"))]
    assert not unknown, "map these README commands in tests/unit/test_readme_commands.py"
    fences = {t.info.strip() for t in MarkdownIt("commonmark").parse(README.read_text()) if t.type == "fence"}
    assert fences <= {"bash", "python", ""}, f"fences of other languages are not checked: {fences}"  # "": Layout


@pytest.mark.parametrize("cmd", of("hsp"), ids=str)
def test_hsp_command_parses_and_its_help_exits_0(cmd: Command, capsys: pytest.CaptureFixture[str]) -> None:
    try:
        build_parser().parse_args(cmd.argv[1:])
    except SystemExit as exc:
        pytest.fail(f"{cmd} does not parse: {capsys.readouterr().err.strip()} (exit {exc.code})")
    assert main([*cmd.argv[1:], "--help"]) == 0, str(cmd)
    assert capsys.readouterr().out.startswith("usage: hsp")


def test_the_installed_hsp_answers_help() -> None:
    hsp = Path(sys.executable).with_name("hsp")
    done = subprocess.run([str(hsp), "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("usage: hsp"), done.stderr


def script_env(cmd: Command) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "HSP_ES_URL": "http://127.0.0.1:1", **dict(cmd.env)}


@pytest.mark.parametrize("cmd", of("py"), ids=str)
def test_ops_python_script_takes_the_arguments_with_help(cmd: Command) -> None:
    argv = cmd.argv[1:] if cmd.argv[0] == "python" else cmd.argv
    done = subprocess.run([sys.executable, *argv, "--help"], cwd=ROOT, env=script_env(cmd), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"{cmd} --help exited {done.returncode}: {done.stderr[-2000:]}"
    assert done.stdout.startswith(f"usage: {Path(argv[0]).name}"), done.stdout[:300]


def usage(*args: str) -> str:
    """ops/es-local.sh's usage line for ``args`` followed by an unknown subcommand (which only prints it)."""
    done = subprocess.run([str(ROOT / "ops/es-local.sh"), *args, "no-such-subcommand"], capture_output=True,
                          text=True, timeout=30)
    assert done.returncode == 2 and "usage:" in done.stderr, done.stderr
    return done.stderr.split("usage:", 1)[1].split(" ", 2)[2]


@pytest.mark.parametrize("cmd", of("sh"), ids=str)
def test_shell_script_is_mapped_and_holds(cmd: Command) -> None:
    script = ROOT / cmd.argv[0]
    assert os.access(script, os.X_OK), f"{cmd.argv[0]} is not executable"
    if SHELL_SCRIPTS[cmd.argv[0]] == "bash -n":
        assert len(cmd.argv) == 1, f"{cmd}: arguments go to pytest or nowhere; map them here"
        done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return
    words = list(cmd.argv[1:])
    listed = usage(*words[:1]) if words[0] == "cluster" else usage()
    names = set(re.findall(r"[a-z]+", listed.split(" [", 1)[0] if words[0] != "cluster" else listed))
    sub = words[1] if words[0] == "cluster" else words[0]
    assert sub in names, f"{cmd}: {sub!r} is not among {sorted(names)}"
    flags = [w for w in words if w.startswith("--")]
    assert all(f in listed for f in flags), f"{cmd}: {flags} not in usage {listed!r}"
    done = subprocess.run([str(script), "version"], env=script_env(cmd), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, f"{cmd}: its environment is refused: {done.stderr}"  # HSP_ENGINE=... is known
