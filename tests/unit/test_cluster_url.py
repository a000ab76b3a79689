"""Cluster URLs become nodes in one place (hybridsearch.cluster_url), and a bad one is reported in one line that
names the variable set and never the password."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hybridsearch.cluster_url import Node, masked, parse_nodes
from hybridsearch.errors import ConfigError
from hybridsearch.settings import load_settings

#: passwords holding every character that ends or splits a URL's parts, and more
PASSWORDS = ["S3cret#Pw", "a/b/c", "what?now", "p@ss@word", "x:y:z", "100%sure", "with space", "pässwörd✓",
             "#/?@:% ü"]


@pytest.mark.parametrize("password", PASSWORDS)
def test_a_password_with_any_character_is_read_whole_and_kept_apart(password: str) -> None:
    (node,) = parse_nodes(f"https://elastic:{password}@127.0.0.1:9200")
    if "%" not in password:  # a raw % followed by two hex digits would be read as an escape
        assert (node.username, node.password) == ("elastic", password)
    assert (node.scheme, node.host, node.port) == ("https", "127.0.0.1", 9200)
    assert node.url == "https://127.0.0.1:9200" and node.shown == "https://***@127.0.0.1:9200"
    assert password not in repr(node) and password not in str(node)


@given(st.text(min_size=1, max_size=30).filter(lambda p: "," not in p))
def test_a_percent_encoded_password_is_decoded(password: str) -> None:
    (node,) = parse_nodes(f"http://u%40x:{quote(password, safe='')}@host:9200")
    assert (node.username, node.password) == ("u@x", password)


def test_nodes_ipv6_default_ports_and_path_prefix() -> None:
    nodes = parse_nodes(" http://[::1]:9201 , https://es.example.com/es/ ,http://Host")
    assert nodes == (Node("http", "::1", 9201), Node("https", "es.example.com", 443, "/es"), Node("http", "Host", 80))
    assert [n.url for n in nodes] == ["http://[::1]:9201", "https://es.example.com:443/es", "http://Host:80"]


@pytest.mark.parametrize(("url", "says"), [
    ("http://user:S3cret#Pw@127.0.0.1:notaport", "the port 'notaport' is not a number from 1 to 65535"),
    ("http://user:S3cret#Pw@127.0.0.1:99999", "the port '99999' is not a number from 1 to 65535"),
    ("http://user:S3cret#Pw@127.0.0.1:0", "the port '0' is not"),
    ("http://user:S3cret#Pw@[::1", "the IPv6 address has no closing ']'"),
    ("http://user:S3cret#Pw@[nothost]:9200", "is not an IPv6 address"),
    ("user:S3cret#Pw@127.0.0.1:9200", "is not an http(s) URL"),
    ("ftp://user:S3cret#Pw@127.0.0.1:9200", "is not an http(s) URL"),
    ("http://user:S3cret#Pw@:9200", "no host"),
    ("http://:S3cret#Pw@host:9200", "have no user name"),
    ("http://u:S3cret#Pw@host:9200/?q=1", "no query, fragment or spaces"),
    (" , ", "no node URL given"),
    ("http://a:S3cret#Pw@h1:9200,http://b:S3cret#Pw@h2:9200", "carry different credentials"),
])
def test_a_bad_url_says_what_is_wrong_without_the_password(url: str, says: str) -> None:
    with pytest.raises(ValueError) as info:
        parse_nodes(url)
    assert says in str(info.value) and "S3cret" not in str(info.value) and "\n" not in str(info.value)


def test_masked_cuts_everything_before_the_last_at() -> None:
    assert masked("http://u:p@ss/w?rd@h:1") == "http://***@h:1"
    assert masked("u:p w@h:1") == "***@h:1" and masked("http://h:1") == "http://h:1"


@pytest.mark.parametrize("var", ["HSP_ES_URL", "HSP_ES__URL"])
def test_the_error_names_the_variable_that_was_set(var: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(var, "user:S3cret#Pw@127.0.0.1:9200")
    with pytest.raises(ConfigError) as info:
        load_settings()
    assert str(info.value).startswith(f"invalid settings: {var}: '***@127.0.0.1:9200' is not an http(s) URL")
    assert "S3cret" not in str(info.value)
