"""Which URLs a webhook may call: http(s) only, and no private, loopback, link-local or other
non-public address unless its host is listed in HAKI_WEBHOOK_ALLOWED_HOSTS, so that no tenant can
make the server call its own network (SSRF).

The check runs at subscription and again before each attempt, on the addresses the host resolves
to then; the attempt connects to the address it checked (`Target.address`), so a name that
resolves elsewhere between the check and the connection (DNS rebinding) changes nothing.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

import msgspec

from service.errors import UrlRefused
from service.structs import WebhookUrl

SCHEMES = {"http": 80, "https": 443}


def allowed_hosts(setting: str | None) -> frozenset[str]:
    """HAKI_WEBHOOK_ALLOWED_HOSTS: host names or IP literals, comma-separated, any case."""
    return frozenset(h.strip().lower().strip("[]") for h in (setting or "").split(",") if h.strip())


@dataclass(frozen=True, slots=True)
class Target:
    """A checked URL: where to connect (`address`), and the host name the request names."""

    url: str
    scheme: str
    host: str
    port: int
    address: str


def parse(url: str, field: str = "url") -> SplitResult:
    # The subscription's own bounds (WebhookUrl), checked here too for a URL stored before them:
    # urlsplit drops a tab, CR or LF, and httpx refuses the other control characters.
    try:
        msgspec.convert(url, WebhookUrl)
    except msgspec.ValidationError as exc:
        raise UrlRefused(field, "must be 1..2048 characters without control characters") from exc
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise UrlRefused(field, f"is not a URL ({exc})") from exc
    if parts.scheme.lower() not in SCHEMES:
        raise UrlRefused(field, "must be an http:// or https:// URL", scheme=parts.scheme)
    if not parts.hostname:
        raise UrlRefused(field, "names no host")
    if parts.username is not None or parts.password is not None:
        raise UrlRefused(field, "must not carry credentials (user:password@)")
    if port == 0:
        raise UrlRefused(field, "names port 0")
    return parts


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address a relay forwards this IPv6 one to: 6to4 (2002::/16) or a Teredo client."""
    if ip.sixtofour is not None:
        return ip.sixtofour
    return ip.teredo[1] if ip.teredo is not None else None


def refused_reason(address: str) -> str | None:
    """Why the service will not call this address, or None for a public one."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        elif (embedded := _embedded_ipv4(ip)) is not None and (
            reason := refused_reason(str(embedded))
        ) is not None:
            # A 6to4 or Teredo relay would carry the request on to the embedded IPv4 address.
            return reason
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_private:
        return "private"
    # is_global alone lets multicast through; shared (100.64/10) and documentation ranges are
    # not global.
    if ip.is_multicast or ip.is_reserved or ip.is_unspecified or not ip.is_global:
        return "not public"
    return None


async def resolve(host: str, port: int) -> list[str]:
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def check(url: str, allowed: frozenset[str], field: str = "url") -> Target:
    """The URL's target once every address its host resolves to is allowed; else UrlRefused."""
    parts = parse(url, field)
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    port = parts.port or SCHEMES[scheme]
    addresses = await resolve(host, port)
    if not addresses:
        raise UrlRefused(field, f"host {host!r} does not resolve", host=host)
    if host not in allowed:
        for address in addresses:
            reason = refused_reason(address)
            if reason is not None:
                raise UrlRefused(
                    field,
                    f"host {host!r} resolves to {address}, a {reason} address; list the host in "
                    "HAKI_WEBHOOK_ALLOWED_HOSTS to allow it",
                    host=host,
                    address=address,
                    reason=reason,
                )
    return Target(url=url, scheme=scheme, host=host, port=port, address=addresses[0])
