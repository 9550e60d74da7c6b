"""Joining a Ray cluster that requires an authentication token, by its address.

Since Ray 2.59 a head started with ``ray start --head`` turns token authentication on when a token
is at hand (``~/.ray/auth_token`` of the user who starts it, the file ``RAY_AUTH_TOKEN_PATH``
names, or ``RAY_AUTH_TOKEN``); from then on every gRPC call to its GCS must carry that token.
A driver sends it only in *token mode* (``RAY_AUTH_MODE=token``). ``ray.init(address="auto")``
switches token mode on by itself when this machine has a token, but an explicit address
(``HOST:PORT``, also through ``RAY_ADDRESS``) never does: Ray will not send a local token to an
address it was merely given. Such a driver is refused (``Unauthenticated``), and ``ray.init``
retries for about 20 seconds, printing a line a second, before it gives up with "Failed to
connect to Ray cluster" and no word about tokens.

Two things here, both before ``ray.init`` (:func:`prepare`), for a cluster that refuses a call
without a token (a cluster without authentication is joined as before):

* :func:`enable_token_mode` switches token mode on for an explicit address when the user gave a
  token on purpose (``RAY_AUTH_TOKEN`` or ``RAY_AUTH_TOKEN_PATH`` set), or when the address is
  that of a GCS running on this very machine (what ``auto`` would have found). An explicit
  ``RAY_AUTH_MODE`` is always left as it is.
* :func:`check_token` asks the GCS for its cluster id once (one gRPC call, a few milliseconds,
  with the token when token mode is on, exactly as ``ray.init`` would send it). A refusal raises
  :class:`ClusterAuthError` at once, saying which token the cluster wants, where it lives on the
  head and how to hand it to this node; Ray's retries and their lines never start. Any other
  answer (or none) is left to ``ray.init``.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

__all__ = ["ClusterAuthError", "enable_token_mode", "check_token", "requires_token", "token_source", "prepare",
           "LOCAL_TOKEN_NOTICE", "local_token_notice"]

MODE_VAR, TOKEN_VAR, PATH_VAR = "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"
DEFAULT_TOKEN_FILE = "~/.ray/auth_token"
_CHECK_TIMEOUT_S = 3.0


LOCAL_TOKEN_NOTICE = (
    "note: the local Ray instance hierfl starts is protected by an authentication token, as Ray does by default "
    f"since 2.59 (the token is kept in {DEFAULT_TOKEN_FILE}). Nothing to do; {MODE_VAR}=disabled starts it "
    "without one.")
"""What a run says, once per process, in place of Ray's own warning when it starts a local instance."""

_RAY_SETUP_LOGGER = "ray._private.authentication.authentication_token_setup"


class _RayTokenWarning(logging.Filter):
    """Drops Ray's "Token authentication is enabled" warning: :data:`LOCAL_TOKEN_NOTICE` says it instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Token authentication is enabled" not in record.getMessage()


def local_token_notice(stream: Any = None) -> bool:
    """Before ``ray.init()`` starts a local instance: Ray's token warning replaced by
    :data:`LOCAL_TOKEN_NOTICE` on ``stream`` (stderr). Said only where Ray would speak: while
    ``RAY_AUTH_MODE`` is unset, which the first start in a process sets (so once per process); a
    user who set it chose, and hears nothing. Returns whether the notice was written."""
    logger = logging.getLogger(_RAY_SETUP_LOGGER)
    if not any(isinstance(f, _RayTokenWarning) for f in logger.filters):
        logger.addFilter(_RayTokenWarning())
    if os.environ.get(MODE_VAR) is not None:
        return False
    print(LOCAL_TOKEN_NOTICE, file=stream if stream is not None else sys.stderr)
    return True


class ClusterAuthError(ConnectionError):
    """The cluster at an address requires a token this process did not send, or sent a wrong one."""


def _gcs_target(address: str) -> str | None:
    """``HOST:PORT`` of a GCS address; None for what is not one (``auto``, ``local``, ``ray://``)."""
    if not address or address in ("auto", "local") or "://" in address:
        return None
    host, _, port = address.rpartition(":")
    return address if host and port.isdigit() else None


def token_mode() -> bool:
    """Whether this process sends a token (Ray's own reading of ``RAY_AUTH_MODE``)."""
    try:
        from ray._raylet import AuthenticationMode, get_authentication_mode
    except ImportError:  # a Ray without token authentication
        return False
    return bool(get_authentication_mode() == AuthenticationMode.TOKEN)


def token_source() -> str | None:
    """Where the token this process would send comes from, in Ray's order; None: no token here."""
    if os.environ.get(TOKEN_VAR, "").strip():
        return f"the {TOKEN_VAR} variable"
    path = os.environ.get(PATH_VAR, "").strip()
    if path and _readable(Path(path).expanduser()):
        return f"{path} ({PATH_VAR})"
    default = Path(DEFAULT_TOKEN_FILE).expanduser()
    return str(default) if _readable(default) else None  # Ray falls back to it when the named file is unusable


def _readable(path: Path) -> bool:
    try:
        return bool(path.read_text(encoding="utf-8").strip())
    except (OSError, UnicodeDecodeError):
        return False


def _this_machine(host: str) -> bool:
    """Whether ``host`` names this machine (a loopback address, or one of its interfaces' addresses)."""
    try:
        ip = socket.gethostbyname(host.strip("[]") or "127.0.0.1")
        if ip.startswith("127."):
            return True
        with socket.socket() as probe:
            probe.bind((ip, 0))  # only an address of this machine can be bound
        return True
    except OSError:
        return False


def _local_gcs(target: str) -> bool:
    """Whether a GCS of this machine listens at ``target`` (what ``ray.init(address="auto")`` would find)."""
    host, _, port = target.rpartition(":")
    if not _this_machine(host):
        return False
    try:
        from ray._private.services import find_gcs_addresses

        return any(str(a).rpartition(":")[2] == port for a in find_gcs_addresses())
    except Exception:  # noqa: BLE001 - another Ray layout: not known to be local
        return False


def enable_token_mode(address: str | None) -> str | None:
    """Switch token mode on for an explicit ``address`` where the user meant it (see the module
    docstring); returns why it was switched on, or None (left as it was)."""
    target = _gcs_target(address or "")
    if target is None or os.environ.get(MODE_VAR) is not None:
        return None  # auto and local are Ray's; an explicit RAY_AUTH_MODE is the user's
    if os.environ.get(TOKEN_VAR, "").strip() or os.environ.get(PATH_VAR, "").strip():
        reason = f"{TOKEN_VAR if os.environ.get(TOKEN_VAR, '').strip() else PATH_VAR} is set"
    elif token_source() is not None and _local_gcs(target):
        reason = f"the cluster at {address} runs on this machine, which has a token"
    else:
        return None
    try:
        from ray._raylet import Config
    except ImportError:
        return None
    os.environ[MODE_VAR] = "token"  # what ray.init(address="auto") does; workers this process starts inherit it
    Config.initialize("")  # Ray caches its configuration: re-read it
    return reason


def _advice(address: str, sent: str | None) -> str:
    head = ("the token is the head's: ~/.ray/auth_token of the user who ran `ray start --head` there (or the "
            f"file {PATH_VAR} named, or {TOKEN_VAR}, in that shell); `ray get-auth-token` on the head prints it")
    node = (f"on this node, put it in {DEFAULT_TOKEN_FILE} and set {MODE_VAR}=token, or set {TOKEN_VAR}=<token> "
            f"(or {PATH_VAR}=<file>)")
    if sent is None:
        why = (f"the Ray cluster at {address} requires an authentication token (token authentication is on) "
               "and this process sent none")
        if os.environ.get(MODE_VAR, "").lower() not in ("", "token"):
            why += f" ({MODE_VAR}={os.environ[MODE_VAR]} here)"
        elif not token_mode() and token_source() is not None:
            why += (f" ({token_source()} holds a token, but Ray sends it to an explicit address only when "
                    f"{MODE_VAR}=token)")
    else:
        why = f"the Ray cluster at {address} refused the authentication token from {sent}: it is not the cluster's"
    return f"{why}. {head[0].upper()}{head[1:]}; {node}. See docs/howto/ray-cluster.md"


def check_token(address: str, timeout_s: float = _CHECK_TIMEOUT_S) -> None:
    """Raise :class:`ClusterAuthError` at once if the GCS at ``address`` refuses this process's
    token (or its lack of one). Silent where the address is not a GCS one, where Ray's internals
    are missing, and for any answer other than a refusal (``ray.init`` reports those)."""
    target = _gcs_target(address)
    if target is None:
        return
    try:
        import grpc
        from ray._private.grpc_utils import init_grpc_channel
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:  # another Ray layout: ray.init finds out itself
        return
    sending = token_mode()
    if sending and token_source() is None:
        raise ClusterAuthError(f"{MODE_VAR}=token but this node has no token (none in {TOKEN_VAR}, {PATH_VAR} "
                               f"or {DEFAULT_TOKEN_FILE}). " + _advice(address, None).split(". ", 1)[1])
    try:
        channel = init_grpc_channel(target)
    except Exception:  # noqa: BLE001 - ray.init reports what is wrong with it
        return
    try:
        stub = gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel)
        stub.GetClusterId(gcs_service_pb2.GetClusterIdRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        if exc.code() == grpc.StatusCode.UNAUTHENTICATED:
            raise ClusterAuthError(_advice(address, token_source() if sending else None)) from None
    except Exception:  # noqa: BLE001 - e.g. a token Ray cannot read: ray.init reports it
        return
    finally:
        channel.close()


def requires_token(address: str, timeout_s: float = _CHECK_TIMEOUT_S) -> bool | None:
    """Whether the GCS at ``address`` refuses a call that carries no token: True, False, or None
    (not a GCS address, TLS, no answer, or Ray's internals missing: unknown)."""
    target = _gcs_target(address)
    if target is None or os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return None
    try:
        import grpc
        from ray.core.generated import gcs_service_pb2, gcs_service_pb2_grpc
    except ImportError:
        return None
    channel = grpc.insecure_channel(target)  # no interceptor: nothing is sent but the request
    try:
        gcs_service_pb2_grpc.NodeInfoGcsServiceStub(channel).GetClusterId(gcs_service_pb2.GetClusterIdRequest(),
                                                                          timeout=timeout_s)
        return False
    except grpc.RpcError as exc:
        return True if exc.code() == grpc.StatusCode.UNAUTHENTICATED else None
    except Exception:  # noqa: BLE001 - unknown: ray.init finds out
        return None
    finally:
        channel.close()


def prepare(address: str | None) -> None:
    """Before ``ray.init(address=...)``: token mode where the cluster requires a token and the user
    meant to give one, then the token checked (:class:`ClusterAuthError` if refused).

    A cluster without authentication is joined without token mode, whatever token this node has:
    a driver in token mode attached to such a cluster has its actors cancelled before they run
    (seen with Ray 2.60), so an explicit ``RAY_AUTH_MODE=token`` there is reported too."""
    if not address or _gcs_target(address) is None:
        return
    required = requires_token(address)
    if required is False:
        if token_mode():
            raise ClusterAuthError(f"the Ray cluster at {address} does not use token authentication, but this "
                                   f"process is in token mode ({MODE_VAR}=token): unset {MODE_VAR} (or set "
                                   f"{MODE_VAR}=disabled) to join it. See docs/howto/ray-cluster.md")
        return
    if required:
        enable_token_mode(address)
    check_token(address)
