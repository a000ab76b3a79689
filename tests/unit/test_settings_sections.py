"""Functions take the settings section they read, not the root ``Settings`` (docs/architecture.md, rule 8).

The package's source is read with ``ast``: every function with a parameter annotated ``Settings`` (or
``Settings | None``) must be a composition root named in :data:`ROOTS` or a command handler, and must really need
the whole tree: it reads at least two sections of it (``settings.index``, ``settings.embedding``...) or hands it on
whole (to another function, a constructor, an attribute). A function that reads one section, or none, takes that
section (or nothing) instead.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hybridsearch.settings import Settings

PACKAGE = Path(__file__).resolve().parents[2] / "platform" / "hybridsearch"
SECTIONS = frozenset(Settings.model_fields)

#: ``module:function`` (methods as ``module:Class.method``) -> why it takes the root Settings. Each one either reads
#: several sections or hands the whole tree on (the test checks which).
ROOTS: dict[str, str] = {
    # the index package: the chunk template renders from index, embedding and chunking together
    "index.spec:render_context": "the template context: index, embedding and chunking",
    "index.spec:load_template": "renders a template (render_context) and the vector field (embedding dims)",
    "index.spec:chunk_meta": "the chunk _meta, rendered from the whole context",
    "index.spec:chunk_spec": "renders the chunk template",
    "index.spec:log_spec": "renders a log template",
    "index.spec:with_analyzer": "the settings a new chunk index is built (and compared) with",
    "index.spec:chunk_spec_for": "chunk_spec on this cluster",
    "index.fit:meta_differences": "compares against the rendered _meta",
    "index.fit:chunk_differences": "compares against the rendered chunk template",
    "index.fit:log_differences": "compares against the rendered log template",
    "index.fit:check_meta": "meta_differences",
    "index.fit:check_mapping": "chunk_differences",
    "index.logs:ensure_log_index": "creates a log index from its rendered spec",
    "index.logs:ensure_log_indices": "ensure_log_index for each log",
    "index.logs:inspect_log_index": "compares against the rendered log template",
    "index.logs:LogWriter.__init__": "creates its log index from the rendered spec when it is missing",
    "index.versions:checked_live_index": "checks the live mapping against the rendered template",
    "index.versions:_create": "creates a chunk index from its rendered spec",
    "index.versions:create_version": "creates a chunk version and the log indices",
    "index.versions:ensure_index": "creates the chunk and log indices",
    "kibana:data_view_fields": "renders the chunk and log templates",
    "kibana:validate": "data_view_fields",
    # migration: builds and checks a version against the whole configuration
    "migrate:migration_settings": "derives the target settings of a migration (index, embedding, chunking)",
    "migrate:migrate": "copies one configuration's index into another's",
    "migrate:_migrate_locked": "creates, fills and checks the new version",
    "rechunk:rechunk_copy": "re-cuts and re-embeds: chunking, embedding, index and ingest",
    # the doctor: every check of a deployment
    "doctor.index:check_index": "index checks: privileges, analyzer, live index",
    "doctor.index:_check_live_index": "the live index against index, embedding and query settings",
    "doctor.logs:check_log_index": "a log index against its rendered spec",
    "doctor.logs:check_log_indices": "check_log_index for each log",
    "doctor:run_checks": "every check",
    # ingestion: one run wires chunking, embedding, the cluster and the indices together
    "ingest.pipeline:run_ingest": "the ingest run",
    "ingest.commit:delete_documents": "the cluster, the chunk indices and the ingest lease",
    "ingest.state:RunState.__init__": "the state of one run (chunking, index, ingest)",
    "ingest.runs:mark_killed": "writes the ingest-runs log (LogWriter)",
    "ingest.runs:store_unrecorded": "writes the ingest-runs log (LogWriter)",
    "ingest.runs:RunRecord.__init__": "writes the ingest-runs log (LogWriter)",
    # evaluation and training workflows
    "eval.workflow:run_evaluation": "the evaluation workflow",
    "eval.calibrate:calibrate_fusion": "the calibration workflow",
    "eval.harness:redacted_settings": "records every section in the report",
    "eval.harness:evaluate_collection": "builds the index, ingests and searches",
    "eval.prepare:eval_settings": "the settings of one collection's indices",
    "eval.prepare:build_signature": "what an evaluation index was built from",
    "eval.prepare:choose_index": "reuses or builds an evaluation index",
    "eval.prepare:ingest_corpus": "run_ingest",
    "eval.sweep:run_sweep": "a SearchClient per setting",
    "training.reranker:run_training": "mines negatives from the index and trains",
    "training.embedder:run_embedder_training": "mines negatives from the index and trains",
    "training.embedder_data:scan_chunks": "the chunk index (index) and how passages were embedded (embedding)",
    "training.negatives:IndexMiner.__init__": "checked_live_index and a SearchClient",
    # the query layer (hybridsearch.query): a client wires the cluster, the encoders, the reranker and the log
    "query.client:SearchClient.__init__": "SearchCore",
    "query.client:SearchClient.from_settings": "connects and builds the client",
    "query.client:AsyncSearchClient.__init__": "SearchCore",
    "query.client:AsyncSearchClient.from_settings": "connects and builds the client",
    "query.core:SearchCore.__init__": "index, query, embedding and reranker of a search",
    "query.core:SearchCore._defaults": "settings and reranker of a client",
    "query.querylog:QueryLogger.__init__": "writes the query log (LogWriter)",
}

#: Functions that still take the root Settings for one section, in modules being reworked elsewhere: each is a
#: known debt. The test fails once one is fixed and still listed here, so the list only shrinks.
DEBT: dict[str, str] = {
}


@dataclass
class Use:
    """How one function uses its root-Settings parameter."""

    sections: set[str] = field(default_factory=set)  # settings.<section> read
    callees: set[str] = field(default_factory=set)  # names of what it is handed to whole (functions, classes)
    whole: bool = False  # handed on whole otherwise: stored, returned, copied, dumped, to another library


def _is_root_settings(annotation: ast.expr | None) -> bool:
    if annotation is None:
        return False
    text = ast.unparse(annotation).replace("'", "").replace('"', "")
    return "Settings" in {part.strip() for part in text.split("|")}


def _uses(func: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> Use:
    use = Use()
    parents = {child: node for node in ast.walk(func) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(func):
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute) and parent.value is node and parent.attr in SECTIONS:
            use.sections.add(parent.attr)
        elif (callee := _callee(node, parent, parents)) is not None:
            use.callees.add(callee)
        else:  # stored, returned, settings.model_copy(...), settings.model_dump(): the whole tree
            use.whole = True
    return use


def _callee(node: ast.AST, parent: ast.AST | None, parents: dict[ast.AST, ast.AST]) -> str | None:
    """The name of the function or class ``node`` is an argument of (``f(settings)``, ``m.f(x=settings)``)."""
    call = parents.get(parent) if isinstance(parent, ast.keyword) else parent
    if not isinstance(call, ast.Call) or node is call.func:
        return None
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and func.attr != "__init__":  # super().__init__(settings): stays opaque
        return func.attr
    return None


def _functions() -> dict[str, dict[str, Use]]:
    """``{module:qualname: {param: Use}}`` for every function with a root-Settings parameter."""
    found: dict[str, dict[str, Use]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)  # a package by its own name
        tree = ast.parse(path.read_text(encoding="utf-8"))

        def visit(node: ast.AST, prefix: str, module: str = module) -> None:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.ClassDef):
                    visit(child, f"{prefix}{child.name}.")
                elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    args = [*child.args.posonlyargs, *child.args.args, *child.args.kwonlyargs]
                    params = {a.arg: _uses(child, a.arg) for a in args if _is_root_settings(a.annotation)}
                    if params:
                        found[f"{module}:{prefix}{child.name}"] = params
                    visit(child, f"{prefix}{child.name}.")

        visit(tree, "")
    return found


def _is_command_handler(key: str) -> bool:
    """``hsp`` subcommands are dispatched as ``handler(args, settings)``: the command line is the composition
    root, so its handlers take the whole tree whatever they read (hybridsearch/cli/)."""
    return key.startswith("cli.")


FOUND = _functions()


def _reads(key: str, seen: frozenset[str] = frozenset()) -> tuple[set[str], bool]:
    """Sections ``key`` reads of its root Settings, itself or through the package functions it hands it to, and
    whether it or one of those hands it anywhere else (stores, returns or copies it, or gives it to another
    library: then it needs the whole tree whatever the sections say)."""
    sections: set[str] = set()
    whole = False
    for use in FOUND[key].values():
        sections |= use.sections
        whole |= use.whole
        for name in use.callees:
            if name == "getattr":  # getattr(settings, group): reads sections by name, the loop around says which
                continue
            targets = [k for k in FOUND if k.rsplit(":", 1)[1] in (name, f"{name}.__init__")]
            if not targets:
                whole = True  # another library, or a package function that takes a section: not ours to judge
            for target in targets:
                if target not in seen:
                    more, opaque = _reads(target, seen | {key})
                    sections |= more
                    whole |= opaque
    return sections, whole


def test_the_scan_sees_the_package() -> None:
    assert "ingest.pipeline:run_ingest" in FOUND and "rerank:make_reranker" not in FOUND
    assert len(FOUND) > 40


def test_only_composition_roots_take_the_root_settings() -> None:
    unknown = sorted(k for k in FOUND if k not in ROOTS and k not in DEBT and not _is_command_handler(k))
    assert not unknown, (
        f"these take the root Settings: {unknown}. Hand a function the section it reads (IndexSettings, "
        "EmbeddingSettings...), or, for a new composition root that wires several sections, add it to ROOTS "
        "with the reason")


@pytest.mark.parametrize("key", sorted(ROOTS))
def test_each_root_needs_the_whole_tree(key: str) -> None:
    assert key in FOUND, f"{key} no longer takes the root Settings: remove it from ROOTS"
    sections, whole = _reads(key)
    assert whole or len(sections) > 1, (
        f"{key} reads only {sorted(sections) or 'nothing'} of the settings (itself or through what it calls): "
        "take that section instead, and remove it from ROOTS")


@pytest.mark.parametrize("key", sorted(DEBT))
def test_the_debt_list_only_shrinks(key: str) -> None:
    assert key in FOUND, f"{key} no longer takes the root Settings: remove it from DEBT"
    sections, whole = _reads(key)
    assert not whole and len(sections) <= 1, (
        f"{key} now needs the whole tree: move it to ROOTS with the reason")


def test_the_rule_catches_a_single_section_function(tmp_path: Path) -> None:
    tree = ast.parse("def f(settings: Settings) -> str:\n    return settings.index.alias\n"
                     "def g(settings: Settings | None) -> object:\n    return h(settings, settings.index)\n"
                     "def k(s: Settings) -> int:\n    return s.index.shards + s.embedding.dims\n")
    uses = {fn.name: _uses(fn, fn.args.args[0].arg) for fn in tree.body if isinstance(fn, ast.FunctionDef)}
    assert (uses["f"].sections, uses["f"].whole) == ({"index"}, False)  # one section: not a root
    assert uses["g"].callees == {"h"} and not uses["g"].whole  # handed to h: judged by what h reads
    assert (uses["k"].sections, uses["k"].whole) == ({"index", "embedding"}, False)
    assert all(_is_root_settings(fn.args.args[0].annotation) for fn in tree.body if isinstance(fn, ast.FunctionDef))
