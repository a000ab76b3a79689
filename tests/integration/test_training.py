"""``hsp train-reranker`` end to end on a real cluster: a generated mini collection is ingested under the
test's prefix, negatives are mined by our hybrid search, a tiny cross-encoder is trained and served."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from hybridsearch.cli.main import main
from hybridsearch.embedding.encoder import Embedder
from hybridsearch.engine import EngineClient, request
from hybridsearch.errors import IndexMismatch
from hybridsearch.ingest.pipeline import run_ingest
from hybridsearch.ingest.sources import Document
from hybridsearch.settings import Settings
from hybridsearch.training.config import TrainingConfig
from hybridsearch.training.negatives import IndexMiner, load_split, relevant_ids
from hybridsearch.training.reranker import run_training

TOPICS = {
    "cardio": ["heart attack risk", "blood pressure drugs", "artery plaque", "cardiac arrest survival"],
    "neuro": ["memory formation", "synapse pruning", "cortex thickness", "neuron regeneration"],
    "bone": ["bone fracture healing", "osteoporosis in women", "calcium intake", "skeleton growth"],
    "liver": ["liver cirrhosis", "bile acid transport", "hepatic enzymes", "fatty liver disease"],
    "lung": ["asthma attacks", "lung cancer screening", "airway inflammation", "oxygen therapy"],
    "skin": ["melanoma detection", "wound healing", "keratin structure", "eczema treatment"],
}


def write_collection(root: Path) -> list[Document]:
    """24 documents, one judged-relevant document per query; 18 train queries, 6 test queries."""
    docs: list[Document] = []
    queries: list[dict[str, str]] = []
    train: list[str] = []
    test: list[str] = []
    for t, subjects in TOPICS.items():
        for i, subject in enumerate(subjects):
            did = f"{t}-{i}"
            docs.append(Document.make(did, f"This study of {subject} in {t} patients reports new findings on "
                                           f"{subject}. Results on {subject} were significant.", title=subject))
            qid = f"{t}{i}"
            queries.append({"_id": qid, "text": f"what is known about {subject}?"})
            (test if i == 3 else train).append(f"{qid}\t{did}\t1\n")
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d.doc_id, "title": d.title, "text": d.text}) + "\n"
                                               for d in docs))
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in queries))
    header = "query-id\tcorpus-id\tscore\n"
    (root / "qrels" / "train.tsv").write_text(header + "".join(train))
    (root / "qrels" / "test.tsv").write_text(header + "".join(test))
    return docs


@pytest.fixture()
def collection(tmp_path: Path, es: EngineClient, settings: Settings, embedder: Embedder) -> Path:
    root = tmp_path / "mini"
    docs = write_collection(root)
    result = run_ingest(docs, settings, es=es, embedder=embedder)
    assert result.documents == len(docs)
    es.send(request.refresh(settings.index.alias))
    return root


def test_index_miner_gives_hybrid_candidates_and_best_chunks(collection: Path, es: EngineClient, settings: Settings,
                                                             embedder: Embedder) -> None:
    miner = IndexMiner(es, settings, embedder)
    cands = miner.candidates("what is known about asthma attacks?", 5)
    assert 1 <= len(cands) <= 5 and len({c.doc_id for c in cands}) == len(cands)
    assert cands[0].doc_id == "lung-0" and cands[0].text.startswith("asthma attacks")
    assert all(c.score > 0 for c in cands) and [c.score for c in cands] == sorted((c.score for c in cands),
                                                                                  reverse=True)  # fused scores
    chunks = miner.best_chunks([("q", "melanoma", "skin-0"), ("q", "melanoma", "no-such-doc")])
    assert list(chunks) == [("q", "skin-0")] and "melanoma" in chunks[("q", "skin-0")]


def test_train_reranker_trains_a_servable_model_from_train_queries_only(
    collection: Path, es: EngineClient, settings: Settings, embedder: Embedder, tiny_cross_encoder: Path,
    tmp_path: Path,
) -> None:
    from sentence_transformers import CrossEncoder

    from hybridsearch.rerank import LocalReranker

    out = tmp_path / "reranker"
    cfg = TrainingConfig(dataset=collection, out=out, base=str(tiny_cross_encoder), negatives=2, depth=10, epochs=1,
                         batch_size=8, max_length=48, val_fraction=0.2, device="cpu", seed=1,
                         max_overlap=0.9)  # the mini collection's templated documents share most words
    card = run_training(cfg, settings, es=es, embedder=embedder, progress=None)

    assert json.loads((out / "card.json").read_text(encoding="utf-8")) == card
    test_qids = {line.split("\t")[0] for line in (collection / "qrels" / "test.tsv").read_text().splitlines()[1:]}
    train = load_split(collection, "train")
    assert set(train.queries).isdisjoint(test_qids)
    assert card["queries"]["train"] + card["queries"]["validation"] == len(train.queries) == 18
    assert [Path(f).name for f in card["files_read"]] == ["train.tsv"]
    assert card["pairs"]["positive"] == card["queries"]["train"]  # one judged document per query, all indexed
    # negatives: 2 per query from what the policy keeps (likely false negatives are never drawn)
    assert card["pairs"]["negative"] <= 2 * card["queries"]["train"] <= card["negatives"]["filtered"]["kept"]
    assert card["negatives"]["policy"]["skip_above_positive"] is True
    # k-fold selection (default 3 folds) over all 18 queries, then one fit on all of them
    cv = card["cross_validation"]
    assert cv["folds"] == 3 and sum(cv["fold_sizes"]) == 18 and len(cv["nested_per_fold"]) == 3
    assert card["training"]["fit_on"] == "all training queries" and card["queries"]["validation_scored"] == 18
    assert card["index"] == f"{settings.index.prefix}-chunks-v1"
    [epoch] = card["validation"]["per_epoch"]
    assert epoch["epoch"] == 1 and 0.0 <= epoch["ndcg_at_10"] <= 1.0 and card["validation"]["best_epoch"] == 1
    assert card["validation"]["fused_order"]["ndcg@10"] > 0.5  # the mini collection is easy for hybrid search

    model = CrossEncoder(str(out), device="cpu")
    reranker = LocalReranker(settings.reranker.model_copy(update={"model": str(out), "device": "cpu"}), settings.models)
    passages = ["asthma attacks. asthma in lung patients", "melanoma detection. skin"]
    np.testing.assert_allclose(reranker.score("asthma", passages),
                               model.predict([("asthma", p) for p in passages], activation_fn=None), rtol=1e-4)

    # searching with it serves the blend and the token length the card recommends
    from hybridsearch import SearchClient

    assert 0.0 <= card["serving"]["blend"] <= 1.0 and card["serving"]["blend"] == epoch["blend"]
    assert reranker.max_length == 48
    with SearchClient(es, settings, embedder=embedder, reranker=reranker) as client:
        res = client.search("what is known about asthma attacks?", k=5)
    assert res.reranked and res.rerank_blend == card["serving"]["blend"]


def test_cli_refuses_the_test_split_and_a_missing_index(collection: Path, settings: Settings, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train-reranker", str(collection), "--split", "test", "--out", str(tmp_path / "m")]) == 2
    assert "refusing" in capsys.readouterr().err
    code = main(["train-reranker", str(collection), "--out", str(tmp_path / "m"), "--prefix", "no-such-prefix-x1",
                 "--no-progress"])
    assert code == 3 and "no-such-prefix-x1-chunks" in capsys.readouterr().err
    assert not (tmp_path / "m").exists()


def test_judgments_loaded_for_training_are_relevant_only(collection: Path) -> None:
    data = load_split(collection, "train")
    assert all(relevant_ids(j) == set(j) for j in data.qrels.values())


# ------------------------------------------------------------------------------------ train-embedder


def test_train_embedder_trains_a_model_an_index_migrates_to_while_searches_run(
    collection: Path, es: EngineClient, settings: Settings, embedder: Embedder, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
) -> None:
    import threading

    from hybridsearch import SearchClient
    from hybridsearch.embedding.cache import model_identity
    from hybridsearch.index.versions import index_meta
    from hybridsearch.training.config import EmbedderConfig
    from hybridsearch.training.embedder import run_embedder_training

    monkeypatch.setenv("HSP_CACHE", str(tmp_path / "hsp-cache"))
    out = tmp_path / "embedder"
    cfg = EmbedderConfig(dataset=collection, out=out, negatives=1, depth=10, epochs=1, batch_size=8,
                         max_seq_length=48, val_fraction=0.2, device="cpu", seed=1)
    card = run_embedder_training(cfg, settings, es=es, embedder=embedder, cache_dir=tmp_path / "cache",
                                 progress=None)

    # trained on train queries only, checked against the test file, validated before and after training
    assert json.loads((out / "card.json").read_text(encoding="utf-8")) == card
    assert [Path(f).name for f in card["files_read"]] == ["train.tsv"]
    assert [Path(f).name for f in card["checked_disjoint_from"]] == ["test.tsv"]
    assert card["queries"]["train"] + card["queries"]["validation"] == 18
    assert card["rows"]["total"] == card["queries"]["train"]  # one judged document per query
    assert [e["epoch"] for e in card["validation"]["per_epoch"]] == [0, 1] and card["validation"]["best_epoch"] == 1
    assert card["validation"]["corpus"]["full_index"] and card["validation"]["corpus"]["documents"] == 24
    assert card["validation"]["per_epoch"][0]["ndcg_at_10"] > 0.5  # the base model on the easy mini collection
    base_length = embedder.max_seq_length  # the base model's own limit, which serving keeps
    assert card["training"]["max_seq_length"] == 48 and card["serving"]["max_seq_length"] == base_length

    # a model name like any other: ingestion encoder, ONNX query encoder, cache identity
    trained = settings.embedding.model_copy(update={"model": str(out), "device": "cpu"})
    mine = Embedder(trained, settings.models)
    assert mine.max_seq_length == base_length
    import importlib.util

    if importlib.util.find_spec("onnxruntime"):
        assert mine.runtime == "onnx"  # exported from the folder, whose files the training recorded
    vec = mine.encode_query("what is known about asthma attacks?")
    assert abs(float(vec @ embedder.encode_query("what is known about asthma attacks?")) - 1) > 1e-6
    assert model_identity(trained, settings.models) != model_identity(settings.embedding, settings.models)

    # roll the index over with `hsp index migrate --to-model DIR` while searches run on the old model: they
    # answer from the old index until the swap, and are refused (never answered from the new one) after it
    monkeypatch.setenv("HSP_ES_URL", settings.es.url)
    monkeypatch.setenv("HSP_INDEX__PREFIX", settings.index.prefix)
    errors: list[str] = []
    answered_from: list[str] = []
    stop = threading.Event()
    old_client = SearchClient(es, settings, embedder=embedder)

    def search_loop() -> None:
        while not stop.is_set():
            try:
                res = old_client.search("what is known about melanoma detection?", k=3, rerank=False)
                assert res.hits
                answered_from.append(res.index)
            except IndexMismatch:
                pass  # after the swap: the old model's vectors do not fit the new index
            except Exception as exc:  # noqa: BLE001 - any other error is what this test looks for
                errors.append(f"{type(exc).__name__}: {exc}")

    searcher = threading.Thread(target=search_loop, daemon=True)
    searcher.start()
    try:
        assert main(["index", "migrate", "--to-model", str(out), "--batch-size", "5"]) == 0
    finally:
        stop.set()
        searcher.join(timeout=60)
    assert errors == [] and answered_from and set(answered_from) == {settings.index.versioned(1)}
    with pytest.raises(IndexMismatch, match=re.escape(out.name)), old_client:
        old_client.search("what is known about melanoma detection?", k=3, rerank=False)
    assert f"HSP_EMBEDDING__MODEL={out}" in capsys.readouterr().out.replace("\n", "")  # rich wraps lines
    v2 = settings.index.versioned(2)
    assert index_meta(es, v2)["embedding_model"] == str(out)
    new = settings.model_copy(update={"embedding": trained})
    with SearchClient(es, new, embedder=mine) as client:
        res = client.search("what is known about melanoma detection?", k=3, mode="dense", rerank=False)
    assert res.hits and res.hits[0].doc_id == "skin-0"


def test_cli_train_embedder_refuses_the_test_split(collection: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["train-embedder", str(collection), "--split", "test", "--out", str(tmp_path / "m")]) == 2
    assert "refusing" in capsys.readouterr().err and not (tmp_path / "m").exists()
