"""Ray's token-authentication warning at a local start is said once, in hierfl's words (no Ray started)."""

from __future__ import annotations

import io
import logging

from hierfl.runtime import ray_auth

RAY_WARNING = ("Token authentication is enabled for this Ray cluster. Set RAY_AUTH_MODE=disabled to opt out. "
               "For more information, see https://docs.ray.io/en/latest/ray-security/token-auth.html")


def _ray_says(message: str) -> bool:
    """Whether Ray's token-setup logger lets ``message`` through."""
    logger = logging.getLogger("ray._private.authentication.authentication_token_setup")
    return bool(logger.filter(logging.LogRecord(logger.name, logging.WARNING, __file__, 1, message, None, None)))


def test_the_local_token_notice_replaces_rays_warning_once(monkeypatch):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    out = io.StringIO()
    assert ray_auth.local_token_notice(out) is True
    assert out.getvalue() == ray_auth.LOCAL_TOKEN_NOTICE + "\n"
    assert "~/.ray/auth_token" in out.getvalue() and "RAY_AUTH_MODE=disabled" in out.getvalue()
    assert not _ray_says(RAY_WARNING) and _ray_says("another Ray warning")
    # Ray's first local start sets RAY_AUTH_MODE in the process: later starts say nothing
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    again = io.StringIO()
    assert ray_auth.local_token_notice(again) is False and again.getvalue() == ""
    assert not _ray_says(RAY_WARNING)


def test_a_chosen_auth_mode_hears_nothing(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    out = io.StringIO()
    assert ray_auth.local_token_notice(out) is False and out.getvalue() == ""
