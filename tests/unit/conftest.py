"""Unit fixtures: stand-in Elasticsearch servers (see standin.py)."""

from __future__ import annotations

import shutil
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from standin import Canned, serve


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
