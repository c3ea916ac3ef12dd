"""A tiny JSON-over-HTTP client for one SGLang server (standard library only).

Sends the optional API key as ``Authorization: Bearer <key>`` (sglang's ``--api-key``; admin
routes need it too) and turns every failure into an ``SGLangError`` carrying the HTTP status.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from rlvr.agents.errors import SGLangError


class SGLangHTTPError(SGLangError):
    """A server answered with an HTTP error status (``status``; ``detail`` is the body)."""

    def __init__(self, message: str, status: int, detail: str) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail


class ServerClient:
    """JSON requests to one server.

    Args:
        url: the server's base URL (``http://host:port``).
        api_key: sent as ``Authorization: Bearer``; None sends no header.
        timeout_s: HTTP timeout of one request.
    """

    def __init__(self, url: str, *, api_key: str | None = None, timeout_s: float = 600.0) -> None:
        self.url = url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s

    def headers(self) -> dict[str, str]:
        """Content type and, with a key, the bearer authorization header."""
        out = {"Content-Type": "application/json"}
        if self.api_key:
            out["Authorization"] = f"Bearer {self.api_key}"
        return out

    def post(self, path: str, payload: dict[str, Any], *, timeout_s: float | None = None
             ) -> dict[str, Any]:
        """POST ``payload`` as JSON; a JSON object answer is returned, anything else wrapped.

        Raises:
            SGLangHTTPError: an HTTP error status.
            SGLangError: the server could not be reached.
        """
        return self._send(path, json.dumps(payload).encode(), "POST", timeout_s)

    def get(self, path: str, *, timeout_s: float | None = None) -> dict[str, Any]:
        """GET ``path``; raises like ``post``."""
        return self._send(path, None, "GET", timeout_s)

    def _send(self, path: str, data: bytes | None, method: str, timeout_s: float | None
              ) -> dict[str, Any]:
        req = urllib.request.Request(self.url + path, data=data, headers=self.headers(),
                                     method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout_s or self.timeout_s) as resp:
                raw = resp.read().decode()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:2000]
            raise SGLangHTTPError(f"{method} {self.url}{path} -> HTTP {exc.code}: {detail[:500]}",
                                  exc.code, detail) from None
        except (urllib.error.URLError, OSError) as exc:
            raise SGLangError(f"{method} {self.url}{path} failed: {exc}") from None
        try:
            body = json.loads(raw) if raw.strip() else None
        except json.JSONDecodeError:
            return {"success": True, "message": raw}
        return body if isinstance(body, dict) else {"success": True, "message": body}


def check_success(path: str, body: dict[str, Any]) -> None:
    """Raise ``SGLangError`` when a weight/memory route answered ``success: false``."""
    if body.get("success") is False:
        raise SGLangError(f"{path} failed: {body.get('message', body)}")
