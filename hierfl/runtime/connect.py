"""Reaching an existing Ray cluster (``--address`` / ``runtime.address``) without hanging.

``ray.init(address="127.0.0.1:1")`` with nothing listening retries for minutes without a word
(issue 14). Before Ray is asked, :func:`probe_address` opens one TCP connection to the address
with a stated timeout, so a typo or a cluster that is down is reported in seconds, by name.
"""

from __future__ import annotations

import socket

__all__ = ["CONNECT_TIMEOUT_S", "AddressError", "split_address", "probe_address"]

CONNECT_TIMEOUT_S = 10.0
"""Seconds to wait for the cluster's port to accept a connection."""

_DEFAULT_PORTS = {"ray://": 10001, "": 6379}


class AddressError(ConnectionError):
    """Nothing reachable at a cluster address; the message names it and says what was tried."""


def split_address(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a ``host:port`` or ``ray://host[:port]`` address; None for ``auto``/``local``
    (Ray finds those itself). Raises ``ValueError`` for an address that is neither."""
    text = address.strip()
    if text in ("auto", "local"):
        return None
    scheme = "ray://" if text.startswith("ray://") else ""
    rest = text[len(scheme):].rstrip("/")
    if not rest or "/" in rest or "://" in rest:
        raise ValueError("expected auto, HOST:PORT or ray://HOST[:PORT]")
    host, sep, port = rest.rpartition(":")
    if not sep:
        host, port = rest, str(_DEFAULT_PORTS[scheme])
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]  # [::1]:6379
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError("expected auto, HOST:PORT or ray://HOST[:PORT] with a port in 1..65535")
    return host, int(port)


def probe_address(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise :class:`AddressError` unless a TCP connection to ``address`` opens within ``timeout_s``."""
    try:
        target = split_address(address)
    except ValueError as exc:
        raise AddressError(f"{address!r}: {exc}") from None
    if target is None:
        return
    host, port = target
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except socket.timeout:
        raise AddressError(f"no answer from {host}:{port} within {timeout_s:g} s (is the Ray cluster up, "
                           "and the port open?)") from None
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise AddressError(f"cannot connect to {host}:{port}: {reason} (nothing listening there? start the "
                           "cluster with `ray start --head`, or check the address)") from None
