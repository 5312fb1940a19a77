"""The names this server answers to, against DNS rebinding.

A page on ``http://evil.example:8420/`` whose name its owner re-resolves to 127.0.0.1 reaches a
server on this machine as a same-origin page: the browser lets it read the answers. What gives it
away is the name it used: the browser sends it as ``Host`` (and ``Origin``). So a request is
answered only when its ``Host`` is a name this server is reached by — the loopback names and the
address the connection came in on (with the port it came in on), and the names it was given (the
host of ``--base-url``) — and a state-changing request only when its ``Origin``, if any, is one of
them too.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


_HOST_PORT = re.compile(
    r"(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<name>[^\[\]:]+))(?::(?P<port>[0-9]{0,5}))?"
)
"""``name[:port]`` or ``[v6]:port``, and nothing else: ``urlsplit`` takes ``x[::1]:8420`` for
``::1``, and no browser sends such a name."""


def split_host(netloc: str) -> tuple[str, int | None] | None:
    """``("name", port)`` of ``name[:port]`` (``[v6]:port`` too), the name lower-cased; None when
    it is not a bare host and port (a path, user info, a bad port, anything around an IPv6
    address's brackets)."""
    if not netloc or any(c in netloc for c in "/?#@\\ \t\r\n"):
        return None
    found = _HOST_PORT.fullmatch(netloc)
    if found is None:
        return None
    port = int(found["port"]) if found["port"] else None
    if port is not None and port > 65535:
        return None
    return (found["v6"] or found["name"]).lower(), port


class ServedHosts:
    """The ``Host`` values one server answers to.

    ``names``: further names it is reached by, each a URL (``https://wf.example.com``, its
    scheme's port implied) or ``host[:port]``; a request may name them without a port (a reverse
    proxy forwards the name alone).
    """

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.named: set[tuple[str, int | None]] = set()
        self.origins: set[tuple[str | None, str, int | None]] = set()
        """The names as an ``Origin`` is compared with them: (scheme, host, port), the scheme
        None (either) for a name given as ``host[:port]``, the port None (any) too if none."""
        for name in names:
            found = _parse_name(name)
            if found is not None:
                self.named.add(found)
                scheme = urllib.parse.urlsplit(name).scheme.lower() if "://" in name else None
                self.origins.add((scheme, *found))

    def serves(self, host: str | None, scheme: str, server: tuple[str, int | None] | None) -> bool:
        """Whether a request with this ``Host`` header, on a connection to ``server`` (the
        ASGI scope's local address and port; None when unknown), is meant for this server."""
        if host is None:
            return False
        found = split_host(host)
        if found is None:
            return False
        name, port = found
        local = set(LOOPBACK_NAMES)
        served_port = None
        if server is not None:
            local.add(server[0].lower().strip("[]"))
            served_port = server[1]
        if name in local:
            given = port if port is not None else _DEFAULT_PORTS.get(scheme, 80)
            return served_port is None or given == served_port
        return any(
            name == known and (port is None or known_port is None or port == known_port)
            for known, known_port in self.named
        )

    def same_site(self, origin: str, server: tuple[str, int | None] | None) -> bool:
        """Whether an ``Origin`` header names this server (``null`` and other sites do not)."""
        try:
            parts = urllib.parse.urlsplit(origin)
        except ValueError:
            return False
        if parts.scheme not in ("http", "https") or parts.path not in ("", "/"):
            return False
        if "?" in origin or "#" in origin:  # a query or fragment: no Origin a browser sends
            return False
        if not self.serves(parts.netloc, parts.scheme, server):
            return False
        found = split_host(parts.netloc)
        if found is None:
            return False
        name, port = found
        if name in LOOPBACK_NAMES or (server is not None and name == server[0].lower().strip("[]")):
            return True  # its port is the connection's (``serves``)
        # A name given: the same origin is the same scheme, host and port (the scheme's own
        # when none is said): http://wf.example.com is not https://wf.example.com's site.
        given = port if port is not None else _DEFAULT_PORTS[parts.scheme]
        return any(
            name == known
            and (scheme is None or scheme == parts.scheme)
            and (known_port is None or known_port == given)
            for scheme, known, known_port in self.origins
        )


def _parse_name(name: str) -> tuple[str, int | None] | None:
    if "://" in name:
        try:
            parts = urllib.parse.urlsplit(name)
            port = parts.port
        except ValueError:
            return None
        if not parts.hostname:
            return None
        return parts.hostname, port if port is not None else _DEFAULT_PORTS.get(parts.scheme)
    return split_host(name)
