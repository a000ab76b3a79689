"""No command prints or writes a password from the cluster URL. ``hsp doctor`` and ``hsp search`` run as a user
would (subprocess) with passwords holding every character that splits a URL, in valid URLs (wrong credentials) and
broken ones; then every command that talks to the cluster runs with such a password that signs in, and nothing it
prints or writes (output, dead letters, reports, run records, logs) holds the password."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest

from conftest import read_env_file
from hybridsearch.cluster_url import parse_nodes
from hybridsearch.engine import EngineClient, request

HSP = [sys.executable, "-c", "from hybridsearch.cli.main import entry; entry()"]
PASSWORDS = ["S3cret#Pw", "S3cret/Pw", "S3cret?Pw", "S3cret@Pw", "S3cret:Pw", "S3cret%Pw", "S3cret Pw",
             "S3crétPw✓"]
COMMANDS = [["doctor", "--no-models", "--no-reranker"], ["search", "x", "--mode", "bm25", "--no-rerank"]]
#: the exit codes a command may end with here: not healthy or an error (1), bad settings (2), the cluster (3)
MAPPED = {1, 2, 3}


def run(url: str, argv: list[str], prefix: str, *, var: str = "HSP_ES_URL",
        extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HSP_ES")}
    env.update({var: url, "HSP_INDEX__PREFIX": prefix, "HSP_QUERY__LOG_QUERIES": "false",
                "HSP_RERANKER__ENABLED": "false", "HSP_ES__MAX_RETRIES": "0", "COLUMNS": "200"})
    if ca := os.environ.get("HSP_ES__CA_CERTS"):
        env["HSP_ES__CA_CERTS"] = ca
    env.update(extra or {})
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


#: the password on a node without security, which accepts any; a secured node (ops/security/es-secure.sh) has the
#: user url-test with a password of the same kind, read from HSP_TEST_URL_PASSWORD_FILE
PLAIN_NODE_PASSWORD = "S3c#/?@:% ü✓-pw"


def _beir(root: Path) -> Path:
    """A three-document BEIR collection with two judged queries."""
    root.mkdir()
    docs = {"d1": "Kernels schedule threads on cores.", "d2": "Bread rises with yeast.", "d3": "Rivers reach seas."}
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": k, "title": "", "text": v}) + "\n"
                                               for k, v in docs.items()))
    (root / "queries.jsonl").write_text('{"_id": "q1", "text": "threads"}\n{"_id": "q2", "text": "yeast"}\n')
    (root / "qrels").mkdir()
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return root


@pytest.fixture()
def signed_in(node: str) -> tuple[str, str, str, str]:
    """A URL that signs in with a password holding ``# / ? @ : %``, a space and non-ASCII: the URL, the user, the
    password and an index prefix the user may write (team-a's on a secured node)."""
    scheme, address = node.split("://")
    prefix = f"t-{uuid.uuid4().hex[:10]}"
    password, user = PLAIN_NODE_PASSWORD, "url-test"
    if path := os.environ.get("HSP_TEST_SECURITY_ENV"):
        secured = read_env_file(Path(path))
        if "HSP_TEST_URL_PASSWORD_FILE" not in secured:
            why = (f"{path} has no url-test user (made by an older ops/es-local.sh): stop the node, delete the "
                   "security folder beside that file and start it again with --secure")
            if os.environ.get("CI"):
                pytest.fail(why)
            pytest.skip(why)
        password = Path(secured["HSP_TEST_URL_PASSWORD_FILE"]).read_text(encoding="utf-8")
        prefix = f"team-a-{prefix}"
    return f"{scheme}://{user}:{quote(password, safe='')}@{address}", user, password, prefix


def test_every_command_keeps_a_working_password_out_of_what_it_prints_and_writes(
        es: EngineClient, signed_in: tuple[str, str, str, str], tiny_bi_encoder: Path, tmp_path: Path) -> None:
    """Every command that talks to the cluster, run with a password that signs in, verbose: the password, its
    percent-encoded form and the Basic credentials built from it appear nowhere — not in stdout or stderr, not in
    dead letters or eval reports on disk, not in any document the runs wrote (run records, ingest state, query
    and ingest logs)."""
    url, user, password, prefix = signed_in
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(3):
        (notes / f"n{i}.md").write_text(f"Note {i} is about threads and cores.\n", encoding="utf-8")
    (notes / "broken.md").write_bytes(b"\xff\xfe\x00\xd8 not text")
    extra = {"HSP_EMBEDDING__MODEL": str(tiny_bi_encoder), "HSP_EMBEDDING__DIMS": "32",
             "HSP_INGEST__DEAD_LETTER_DIR": str(tmp_path / "dead-letter"), "HSP_QUERY__LOG_QUERIES": "true"}
    commands = [["-v", "ingest", str(notes), "--no-progress"],
                ["-v", "search", "threads", "--mode", "hybrid", "--no-rerank"],
                ["search", "threads", "--explain", "--format", "json", "--no-rerank"],
                ["index", "status"], ["index", "fusion", "zscore"], ["index", "rollback"],
                ["doctor", "--no-models", "--no-reranker"], ["delete", "n0.md"],
                ["eval", str(_beir(tmp_path / "beir")), "--modes", "bm25,hybrid", "--prefix", f"{prefix}-eval",
                 "--out", str(tmp_path / "reports"), "--no-embedding-cache"]]
    try:
        printed: list[str] = []
        codes: list[int] = []
        for argv in commands:
            done = run(url, argv, prefix, extra=extra)
            printed.append(done.stdout + done.stderr)
            codes.append(done.returncode)
            assert "Traceback" not in printed[-1], printed[-1][-2000:]
        # ingest dead-letters broken.md (1); rollback has no older version (2); doctor may warn about privileges
        assert [c for i, c in enumerate(codes) if i != 6] == [1, 0, 0, 0, 0, 2, 0, 0], printed
        assert codes[6] in {0, 1} and "deleted 1 chunks" in printed[7]
        assert list((tmp_path / "dead-letter").iterdir()) and list((tmp_path / "reports").glob("*.json"))
        es.send(request.refresh(f"{prefix}-*"))
        stored = es.send(request.search(f"{prefix}-*", request.body(query={"match_all": {}}, size=1000)))
        on_disk = [p.read_text(errors="replace") for p in tmp_path.rglob("*")
                   if p.is_file() and p.suffix in {".json", ".jsonl", ".md", ".txt", ".log", ""}
                   and "notes" not in p.parts]
        assert stored["hits"]["hits"] and on_disk
        basic = base64.b64encode(f"{user}:{password}".encode()).decode()
        for secret in (password, quote(password, safe=""), quote(password), basic):
            for text in [*printed, json.dumps(stored, ensure_ascii=False), json.dumps(stored), *on_disk]:
                assert secret not in text, text[-2000:]
    finally:
        es.send(request.delete_index(f"{prefix}-*", expand_wildcards="all"))
