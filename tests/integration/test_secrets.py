"""No command prints a password from the cluster URL: ``hsp doctor`` and ``hsp search`` run as a user would
(subprocess), with passwords holding every character that splits a URL, in valid URLs (wrong and right
credentials) and broken ones; stdout and stderr never hold the password, and the exit code is a mapped one."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from hybridsearch.cluster_url import parse_nodes

HSP = [sys.executable, "-c", "from hybridsearch.cli.main import entry; entry()"]
PASSWORDS = ["S3cret#Pw", "S3cret/Pw", "S3cret?Pw", "S3cret@Pw", "S3cret:Pw", "S3cret%Pw", "S3cret Pw",
             "S3crétPw✓"]
COMMANDS = [["doctor", "--no-models", "--no-reranker"], ["search", "x", "--mode", "bm25", "--no-rerank"]]
#: the exit codes a command may end with here: not healthy or an error (1), bad settings (2), the cluster (3)
MAPPED = {1, 2, 3}


def run(url: str, argv: list[str], prefix: str, *, var: str = "HSP_ES_URL") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HSP_ES")}
    env.update({var: url, "HSP_INDEX__PREFIX": prefix, "HSP_QUERY__LOG_QUERIES": "false",
                "HSP_RERANKER__ENABLED": "false", "HSP_ES__MAX_RETRIES": "0", "COLUMNS": "200"})
    if ca := os.environ.get("HSP_ES__CA_CERTS"):
        env["HSP_ES__CA_CERTS"] = ca
    return subprocess.run([*HSP, *argv], env=env, capture_output=True, text=True, timeout=120)


def assert_kept(done: subprocess.CompletedProcess[str], password: str) -> None:
    printed = done.stdout + done.stderr
    assert password not in printed and password.replace(" ", "%20") not in printed, printed[-2000:]
    assert "Traceback" not in printed and done.returncode in MAPPED, printed[-2000:]


@pytest.fixture(scope="module")
def node(es_url: str) -> str:
    """The node's address, scheme included, without credentials."""
    first = parse_nodes(es_url)[0]
    return f"{first.scheme}://{first.address}"


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_valid_url_with_a_wrong_password_never_prints_it(node: str, password: str) -> None:
    scheme, address = node.split("://")
    for argv in COMMANDS:
        done = run(f"{scheme}://hsp-nobody:{password}@{address}", argv, f"t-{uuid.uuid4().hex[:10]}")
        assert_kept(done, password)
        if os.environ.get("HSP_TEST_SECURITY_ENV"):  # a secured node refuses the credentials; a plain one has none
            assert "authentication failed" in done.stdout + done.stderr or done.returncode == 1


@pytest.mark.parametrize(("var", "broken"), [("HSP_ES_URL", "{n}:notaport"), ("HSP_ES__URL", "{n}:99999"),
                                            ("HSP_ES_URL", "[::1"), ("HSP_ES__URL", "{n}/?q=1")])
def test_a_broken_url_is_named_in_one_line_without_the_password(node: str, broken: str, var: str) -> None:
    password = "#/?@:% ü-S3cret"
    host = node.split("://")[1].rsplit(":", 1)[0]
    url = f"http://elastic:{password}@" + broken.format(n=host)
    for argv in COMMANDS:
        done = run(url, argv, "t-never", var=var)
        assert_kept(done, password)
        assert done.returncode == 2 and done.stderr.startswith(f"error: invalid settings: {var}: ")
        assert done.stderr.count("\n") <= 2


def test_the_right_credentials_percent_encoded_sign_in(node: str) -> None:
    """Every character of the user name and password escaped (``%XX``): the node accepts the decoded ones."""
    user, password = os.environ.get("HSP_ES__USERNAME"), os.environ.get("HSP_ES__PASSWORD")
    if not user or not password:
        pytest.skip("the node has no credentials to sign in with")
    scheme, address = node.split("://")
    def escaped(text: str) -> str:
        return "".join(f"%{b:02X}" for b in text.encode())

    done = run(f"{scheme}://{escaped(user)}:{escaped(password)}@{address}", COMMANDS[0], f"t-{uuid.uuid4().hex[:10]}")
    assert_kept(done, password)
    assert "authentication failed" not in done.stdout + done.stderr
