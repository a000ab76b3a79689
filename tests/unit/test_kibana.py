"""The Kibana saved objects fit our mappings, and the import sends what Kibana expects."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from email.parser import BytesParser
from email.policy import HTTP
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar, cast

import pytest

from hybridsearch import kibana
from hybridsearch.cli.main import main
from hybridsearch.errors import ClusterError, ClusterUnavailable
from hybridsearch.settings import load_settings


@pytest.fixture(scope="module")
def objects() -> list[dict[str, Any]]:
    return kibana.load_objects()


def test_every_line_parses_and_validates(objects: list[dict[str, Any]]) -> None:
    assert kibana.saved_objects_path().name == "hybridsearch.ndjson"
    assert kibana.validate(objects, load_settings()) == []
    types = [o["type"] for o in objects]
    assert types.count("index-pattern") == 3 and types.count("dashboard") == 1 and types.count("lens") >= 6


def test_data_views_target_our_indices(objects: list[dict[str, Any]]) -> None:
    views = {o["attributes"]["title"]: o["attributes"].get("timeFieldName") for o in objects
             if o["type"] == "index-pattern"}
    assert views == {"hsp-chunks": None, "hsp-query-log*": "@timestamp", "hsp-ingest-runs*": "@timestamp"}


def test_every_lens_field_exists_in_the_mapping_behind_its_view(objects: list[dict[str, Any]]) -> None:
    fields = kibana.data_view_fields(load_settings())
    views = {o["id"]: o["attributes"]["title"].rstrip("*") for o in objects if o["type"] == "index-pattern"}
    used = set()
    for obj in (o for o in objects if o["type"] == "lens"):
        refs = {r["name"]: r["id"] for r in obj["references"]}
        layers = obj["attributes"]["state"]["datasourceStates"]["formBased"]["layers"]
        for layer, spec in layers.items():
            view = views[refs[f"indexpattern-datasource-layer-{layer}"]]
            for col in spec["columns"].values():
                if col.get("sourceField") not in (None, kibana.RECORDS):
                    assert col["sourceField"] in fields[view], (obj["id"], col["sourceField"])
                    used.add(col["sourceField"])
    # the dashboard covers what operators asked for: per-stage latency, zero hits, reranker, ingest
    assert {f"latency_ms.{s}" for s in ("embed", "search", "fusion", "rerank")} <= used
    assert {"rerank_reason", "chunks_per_second", "failed", "documents_failed", "query.raw"} <= used


def test_dashboard_shows_every_lens_and_references_resolve(objects: list[dict[str, Any]]) -> None:
    dash = next(o for o in objects if o["type"] == "dashboard")
    lens_ids = {o["id"] for o in objects if o["type"] == "lens"}
    assert {r["id"] for r in dash["references"]} == lens_ids
    panels = json.loads(dash["attributes"]["panelsJSON"])
    assert len(panels) == len(lens_ids)
    titles = " | ".join(o["attributes"]["title"].lower() for o in objects if o["type"] == "lens")
    for words in ("queries per minute", "p50", "p95", "zero-hit", "reranker degradations", "ingest throughput",
                  "ingest failures"):
        assert words in titles


@pytest.mark.parametrize("mutate, problem", [
    (lambda o: o[3]["attributes"]["state"]["datasourceStates"]["formBased"]["layers"]["layer1"]["columns"]
     .update(x={"operationType": "sum", "sourceField": "latency_ms.nope"}), "unknown field 'latency_ms.nope'"),
    (lambda o: o[3]["attributes"]["state"]["datasourceStates"]["formBased"]["layers"]["layer1"]["columns"]
     .update(x={"operationType": "average", "sourceField": "mode"}), "average of keyword"),
    (lambda o: o[3]["references"][0].update(id="no-such-view"), "missing index-pattern no-such-view"),
    (lambda o: o[1]["attributes"].update(title="other-*"), "targets 'other-*'"),
    (lambda o: o[1]["attributes"].update(timeFieldName="query"), "not a date"),
    (lambda o: o.append(dict(o[0])), "duplicate id"),
])
def test_validation_catches_broken_objects(objects: list[dict[str, Any]], mutate: Any, problem: str) -> None:
    broken = kibana.rewrite_prefix(objects, "hsp")  # a deep copy
    mutate(broken)
    assert any(problem in p for p in kibana.validate(broken, load_settings())), kibana.validate(broken,
                                                                                               load_settings())


def test_rewrite_prefix_renames_everything_and_keeps_the_original(objects: list[dict[str, Any]]) -> None:
    team = kibana.rewrite_prefix(objects, "team-a")
    text = kibana.to_ndjson(team).decode()
    assert '"hsp-' not in text and "(hsp)" not in text
    assert kibana.validate(team, load_settings(index={"prefix": "team-a"})) == []
    titles = {o["attributes"]["title"] for o in team if o["type"] == "index-pattern"}
    assert titles == {"team-a-chunks", "team-a-query-log*", "team-a-ingest-runs*"}
    assert next(o for o in team if o["type"] == "dashboard")["attributes"]["title"] == "hybridsearch (team-a)"
    assert objects[0]["id"].startswith("hsp-")  # untouched
    # two teams' copies do not collide in one Kibana
    assert not {o["id"] for o in team} & {o["id"] for o in objects}


class _FakeKibana(BaseHTTPRequestHandler):
    requests: ClassVar[list[dict[str, Any]]] = []
    answer: ClassVar[tuple[int, dict[str, Any]]] = (200, {})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
        status, payload = self.answer
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture()
def fake_kibana() -> Iterator[tuple[str, type[_FakeKibana]]]:
    handler = type("Handler", (_FakeKibana,), {"requests": [], "answer": (200, {"success": True, "successCount": 13})})
    server = HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", handler
    server.shutdown()
    server.server_close()


def _uploaded(request: dict[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    head = f"Content-Type: {request['headers']['Content-Type']}\r\n\r\n".encode()
    message = BytesParser(policy=HTTP).parsebytes(head + request["body"])
    (part,) = list(message.iter_parts())
    lines = cast(bytes, part.get_payload(decode=True)).decode().splitlines()  # a leaf part decodes to bytes
    return part.get_filename(), [json.loads(line) for line in lines]


def test_import_posts_multipart_ndjson_with_xsrf_and_overwrite(fake_kibana: tuple[str, Any],
                                                               objects: list[dict[str, Any]]) -> None:
    url, handler = fake_kibana
    team = kibana.rewrite_prefix(objects, "team-a")
    answer = kibana.import_objects(url + "/", team, space="ops", api_key="abc==")
    assert answer["successCount"] == 13
    (req,) = handler.requests
    assert req["path"] == "/s/ops/api/saved_objects/_import?overwrite=true"
    assert req["headers"]["kbn-xsrf"] and req["headers"]["Authorization"] == "ApiKey abc=="
    assert req["headers"]["Content-Type"].startswith("multipart/form-data")
    filename, sent = _uploaded(req)
    assert filename == "hybridsearch.ndjson" and sent == team


def test_import_reports_kibana_errors(fake_kibana: tuple[str, Any], objects: list[dict[str, Any]]) -> None:
    url, handler = fake_kibana
    handler.answer = (200, {"success": False, "successCount": 12, "errors": [
        {"type": "lens", "id": "hsp-lens-x", "error": {"type": "missing_references"}}]})
    with pytest.raises(ClusterError, match=r"12 of 13.*missing_references"):
        kibana.import_objects(url, objects)
    handler.answer = (403, {"statusCode": 403, "message": "forbidden"})
    with pytest.raises(ClusterError, match="HTTP 403: forbidden"):
        kibana.import_objects(url, objects)


def test_import_when_kibana_is_down() -> None:
    with pytest.raises(ClusterUnavailable, match="Kibana did not answer"):
        kibana.import_objects("http://127.0.0.1:1", [], timeout=2)


def test_cli_import_rewrites_for_the_prefix(fake_kibana: tuple[str, Any], monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    url, handler = fake_kibana
    for name in ("HSP_ES__API_KEY", "HSP_ES__USERNAME", "HSP_ES__PASSWORD"):  # e.g. a secured test node's
        monkeypatch.delenv(name, raising=False)
    assert main(["kibana", "import", "--url", url, "--prefix", "team-b"]) == 0
    assert "team-b" in capsys.readouterr().out
    _, sent = _uploaded(handler.requests[0])
    assert {o["attributes"]["title"] for o in sent if o["type"] == "index-pattern"} == {
        "team-b-chunks", "team-b-query-log*", "team-b-ingest-runs*"}
    assert "Authorization" not in handler.requests[0]["headers"]
    assert main(["kibana", "import", "--url", "http://127.0.0.1:1"]) == 3  # cluster-type error exit code
