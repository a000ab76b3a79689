"""ops/security/roles.yml is the one source of the team roles: docs/operations.md shows it verbatim and
its JSON examples are the same descriptors; the roles grant no cluster privilege that writes, and enough
for everything the platform checks before writing."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from hybridsearch.index.access import CREATE, DROP, INGEST, MOVE_ALIAS

ROOT = Path(__file__).resolve().parents[2]
ROLES_FILE = ROOT / "ops" / "security" / "roles.yml"
DOCS = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
ROLES: dict[str, Any] = yaml.safe_load(ROLES_FILE.read_text(encoding="utf-8"))
# Index privileges that imply others (Elasticsearch's own hierarchy, the part the platform relies on).
IMPLIED = {"manage": {"monitor", "view_index_metadata", "delete_index", "create_index"},
           "write": {"create_doc", "index", "delete", "create"}, "all": {"*"}}
WRITES = {"write", "index", "create", "create_doc", "delete", "create_index", "manage", "delete_index", "all"}


def granted(role: dict[str, Any], name: str) -> set[str]:
    """Index privileges ``role`` holds on index ``name`` (with what they imply)."""
    privs: set[str] = set()
    for grant in role["indices"]:
        if any(re.fullmatch(pattern.replace("*", ".*"), name) for pattern in grant["names"]):
            privs.update(grant["privileges"])
    return privs | {p for g in list(privs) for p in IMPLIED.get(g, set())}


def test_docs_show_the_roles_file_verbatim() -> None:
    block = re.search(r"<!-- ops/security/roles\.yml: keep verbatim -->\n```yaml\n(.*?)```", DOCS, re.S)
    assert block is not None, "docs/operations.md lost the roles.yml block"
    assert block.group(1) == ROLES_FILE.read_text(encoding="utf-8")


def test_docs_json_examples_are_the_team_role() -> None:
    bodies = [json.loads(m) for m in re.findall(r"-d '(\{.*?\})'\n```", DOCS, re.S)]
    assert len(bodies) == 2
    role_api, api_key = bodies
    assert role_api == ROLES["hsp-team-a"]
    assert api_key["role_descriptors"] == {"hsp-team-a": ROLES["hsp-team-a"]}


def test_no_role_holds_a_cluster_privilege_that_writes() -> None:
    """Least privilege (issue 15, item 2): manage_index_templates let one team rewrite another's templates."""
    assert {name: set(role.get("cluster", [])) for name, role in ROLES.items()} == {
        name: {"monitor"} for name in ROLES}
    table = [line for line in DOCS.splitlines() if line.startswith("| cluster ")]
    assert table == ["| cluster `monitor` | `_cluster/health`, `_nodes` (version, disk) for `hsp doctor` |"]


@pytest.mark.parametrize(("role", "prefix"), [("hsp-team-a", "team-a"), ("hsp-team-b", "team-b")])
def test_team_roles_grant_what_the_platform_checks_on_their_prefix_only(role: str, prefix: str) -> None:
    for name in (f"{prefix}-chunks-v1", f"{prefix}-chunks", f"{prefix}-query-log", f"{prefix}-ingest-runs"):
        assert set(INGEST) | set(CREATE) | set(MOVE_ALIAS) | set(DROP) <= granted(ROLES[role], name), name
    other = "team-b" if prefix == "team-a" else "team-a"
    assert not granted(ROLES[role], f"{other}-chunks-v1")


def test_read_only_role_sees_status_and_appends_to_its_query_log_only() -> None:
    """`hsp index status` reads _cat/indices, which needs the index privilege monitor (issue 15, item 4)."""
    reader = ROLES["hsp-searcher-a"]
    chunks = granted(reader, "team-a-chunks-v1")
    assert {"read", "view_index_metadata", "monitor"} <= chunks and not chunks & WRITES
    assert granted(reader, "team-a-query-log") & WRITES == {"create_doc"}
    assert not granted(reader, "team-b-chunks-v1")
