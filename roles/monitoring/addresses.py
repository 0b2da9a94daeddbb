"""HOST:PORT listen addresses and scrape targets, checked before anything is rendered."""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

_LABEL = r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOSTNAME = re.compile(rf"^(?=.{{1,253}}$){_LABEL}(\.{_LABEL})*$")


def split_host_port(text: str) -> tuple[str, int]:
    """``"127.0.0.1:9100"`` -> ``("127.0.0.1", 9100)``; ``"[::1]:9090"`` -> ``("::1", 9090)``.

    Raises ValueError with the reason; an empty host (``":9100"``, all interfaces) is refused:
    sparkguard binds to one address, never to every interface by accident.
    """
    if not isinstance(text, str) or not text or any(c.isspace() for c in text) or any(c in text for c in "\"'\\$`"):
        raise ValueError("expected HOST:PORT (no spaces or quotes)")
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or not rest.startswith(":"):
            raise ValueError("expected [IPv6]:PORT")
        port_text = rest[1:]
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"{host!r} is not an IPv6 address") from None
    else:
        host, sep, port_text = text.rpartition(":")
        if not sep:
            raise ValueError("expected HOST:PORT, the port is missing")
        if not host:
            raise ValueError("the host is empty (that would listen on every interface); name the address")
        if ":" in host:
            raise ValueError("an IPv6 address needs brackets: [ADDR]:PORT")
        if not _is_ipv4(host) and not _HOSTNAME.match(host):
            raise ValueError(f"{host!r} is neither an IPv4 address nor a host name")
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        raise ValueError(f"port {port_text!r} is not a number in 1..65535")
    return host, int(port_text)


def _is_ipv4(host: str) -> bool:
    if not re.fullmatch(r"[0-9.]+", host):
        return False
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise ValueError(f"{host!r} is not a valid IPv4 address") from None
    return True


def default_address(ssh_host: str, port: int) -> str:
    """The node's management address with ``port``; brackets for IPv6."""
    host = ssh_host.strip()
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def alertmanager_target(url: str) -> dict[str, Any]:
    """An Alertmanager base URL as Prometheus' alertmanager config wants it."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError("expected http(s)://HOST:PORT[/PATH]")
    netloc = parts.netloc
    if "@" in netloc:
        raise ValueError("credentials in the URL would be written in clear text; use a reverse proxy")
    if not re.search(r":\d+$", netloc):
        netloc += ":443" if parts.scheme == "https" else ":80"
    split_host_port(netloc)
    entry = {"scheme": parts.scheme, "static_configs": [{"targets": [netloc]}]}
    if parts.path.strip("/"):
        entry["path_prefix"] = "/" + parts.path.strip("/")
    return entry


def check_url(url: str) -> None:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc or any(c.isspace() for c in url):
        raise ValueError("expected an http(s):// URL")
