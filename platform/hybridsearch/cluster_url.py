"""The one place where a URL becomes nodes (:func:`parse_nodes`), and where URLs lose their credentials before
anything prints them (:func:`redact_url`). A leaf module."""

from __future__ import annotations

import http.client
import ipaddress
import re
import ssl
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import unquote

DEFAULT_PORTS = {"http": 80, "https": 443}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_HOST = re.compile(r"[\w.-]+")  # a host name (international ones too) or an IPv4 address
_USERINFO = re.compile(r"(?<=://)[^/?#\s]*@")  # up to the last @ before the host
_BARE_USERINFO = re.compile(r"^\s*[^/?#\s:]+:[^/?#\s]*@")
MASK = "***"


@dataclass(frozen=True)
class Node:
    """One node: where it is, and the credentials its URL carried (never printed; sent as a header)."""

    scheme: Literal["http", "https"]
    host: str  # an IPv6 address without brackets
    port: int
    path: str = ""  # a path prefix ("/es"), or ""
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        """``host:port`` (``[::1]:9200`` for IPv6)."""
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The node's URL without credentials."""
        return f"{self.scheme}://{self.address}{self.path}"

    @property
    def shown(self) -> str:
        """What people see: the URL, its credentials masked."""
        return f"{self.scheme}://{MASK}@{self.address}{self.path}" if self.username is not None else self.url

    def __str__(self) -> str:
        return self.shown


def masked(text: str) -> str:
    """``text`` (one URL as given) with everything between the scheme and its last ``@`` replaced by ``***``."""
    text = text.strip()
    match = _SCHEME.match(text)
    start = match.end() if match else 0
    at = text.rfind("@")
    return text if at < start else f"{text[:start]}{MASK}{text[at:]}"


def redact_url(text: str) -> str:
    """``text`` (URLs, or any message holding them) with each URL's user-info replaced by ``***``."""
    text = _USERINFO.sub(MASK + "@", text)
    return text if "://" in text else _BARE_USERINFO.sub(MASK + "@", text)


def shown(nodes: tuple[Node, ...]) -> str:
    """Nodes as people see them, comma-separated."""
    return ", ".join(n.shown for n in nodes)


def _port(text: str, given: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 65535:
        raise ValueError(f"{masked(given)!r}: the port {text!r} is not a number from 1 to 65535")
    return int(text)


def _host_port(authority: str, scheme: str, given: str) -> tuple[str, int]:
    default = DEFAULT_PORTS[scheme]
    if authority.startswith("["):
        host, sep, rest = authority[1:].partition("]")
        if not sep:
            raise ValueError(f"{masked(given)!r}: the IPv6 address has no closing ']'")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{masked(given)!r}: {host!r} is not an IPv6 address") from None
        if rest and not rest.startswith(":"):
            raise ValueError(f"{masked(given)!r}: expected ':port' after the IPv6 address")
        return host, _port(rest[1:], given) if rest else default
    host, sep, port = authority.partition(":")
    if not _HOST.fullmatch(host):
        what = "no host" if not host else f"the host {host!r} is not a host name or address"
        raise ValueError(f"{masked(given)!r}: {what} (IPv6 addresses go in brackets: http://[::1]:9200)")
    return host, _port(port, given) if sep else default


def parse_node(text: str) -> Node:
    """One node URL; raises ValueError with the user-info masked."""
    given = text.strip()
    match = _SCHEME.match(given)
    if match is None or match.group(1).lower() not in DEFAULT_PORTS:
        raise ValueError(f"{masked(given)!r} is not an http(s) URL (write http://host:port or https://host:port)")
    scheme: Literal["http", "https"] = "https" if match.group(1).lower() == "https" else "http"
    rest = given[match.end():]
    username = password = None
    if "@" in rest:
        userinfo, rest = rest.rsplit("@", 1)
        user, sep, secret = userinfo.partition(":")
        if not user:
            raise ValueError(f"{masked(given)!r}: the credentials before '@' have no user name")
        username, password = unquote(user), (unquote(secret) if sep else "")
    authority, slash, path = rest.partition("/")
    if any(c in rest for c in "?#") or any(c.isspace() for c in rest):
        raise ValueError(f"{masked(given)!r}: a node URL has no query, fragment or spaces after the host "
                         "(percent-encode them in the credentials, or leave them out)")
    host, port = _host_port(authority, scheme, given)
    return Node(scheme, host, port, ("/" + path).rstrip("/") if slash else "", username, password)


def parse_nodes(text: str) -> tuple[Node, ...]:
    """The comma-separated ``http(s)://[user:password@]host[:port][/path]`` URLs of ``text``: IPv6 in brackets,
    percent-escapes decoded, the user-info up to the last ``@`` (so a password may hold any character; a comma is
    ``%2C``). Raises ValueError (one line, credentials masked) for a URL that cannot be read, for none, and for
    differing credentials."""
    nodes = tuple(parse_node(part) for part in text.split(",") if part.strip())
    if not nodes:
        raise ValueError("no node URL given (write http://host:port, several separated by commas)")
    if len({(n.username, n.password) for n in nodes}) > 1:
        raise ValueError(f"the nodes {shown(nodes)} carry different credentials: give them once "
                         "(HSP_ES__USERNAME / HSP_ES__PASSWORD) or the same in every URL")
    return nodes


PROBE_TIMEOUT_S = 2.0  # the one scheme probe, only run after a request failed to connect


def speaks(host: str, port: int, *, tls: bool) -> bool:
    """Whether ``host:port`` completes a TLS handshake (any certificate), or without ``tls``, answers plain HTTP."""
    try:
        if tls:
            return bool(ssl.get_server_certificate((host, port), timeout=PROBE_TIMEOUT_S))
        probe = http.client.HTTPConnection(host, port, timeout=PROBE_TIMEOUT_S)
        try:
            probe.request("HEAD", "/")
            return probe.getresponse().status > 0
        finally:
            probe.close()
    except (OSError, UnicodeError, http.client.HTTPException):  # ssl.SSLError included
        return False
