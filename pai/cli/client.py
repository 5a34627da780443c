"""A small client of the platform's REST API (OpenPAI v2 compatible) for the command line.

It knows the routes the CLI uses, turns error bodies ({code, message, problems}) into one
exception type, and keeps the login token per server in ``$PAI_CONFIG_DIR`` (default
``~/.config/pai``) with owner-only permissions.

Requests go through the standard library's ``urllib.request`` (proxies from the environment, as
every HTTP client reads them; certificates from ``SSL_CERT_FILE``, else certifi's bundle, else the
system's; no redirect followed): a command that makes a few plain requests then starts in a
fraction of the time httpx and httpcore take to import (bench/RESULTS.md, "The `pai` command's
own start-up"). Streams (``events``, ``watch``) keep httpx and httpx-sse.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlencode

if TYPE_CHECKING:
    import ssl
    from email.message import Message

DEFAULT_SERVER = "http://127.0.0.1:9186"
CREDENTIALS_FILE = "credentials.json"


class ClientError(Exception):
    """Anything that stops a request; ``str()`` is a message for the user."""


class ServerUnreachableError(ClientError):
    pass


class ApiError(ClientError):
    """The server answered with an error body: OpenPAI's message, and apart from it the
    platform's advice on what to do next (``hint``), which is printed on a line of its own."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        problems: list[dict[str, Any]] | None = None,
        *,
        retry_after: float | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.problems = problems or []
        self.retry_after = retry_after
        self.hint = hint


def config_dir() -> Path:
    configured = os.environ.get("PAI_CONFIG_DIR")
    return Path(configured) if configured else Path.home() / ".config" / "pai"


@dataclass(frozen=True)
class Login:
    server: str
    user: str
    token: str


def _normalise(server: str) -> str:
    return server.rstrip("/")


def load_logins() -> dict[str, Login]:
    path = config_dir() / CREDENTIALS_FILE
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {
        server: Login(server=server, user=str(item["user"]), token=str(item["token"]))
        for server, item in (data.get("servers") or {}).items()
        if isinstance(item, dict) and "user" in item and "token" in item
    }


def save_login(login: Login) -> Path:
    logins = load_logins()
    logins[_normalise(login.server)] = login
    directory = config_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / CREDENTIALS_FILE
    payload = {
        "servers": {server: {"user": item.user, "token": item.token} for server, item in logins.items()},
        "last": _normalise(login.server),
    }
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(payload, handle, indent=2)
    return path


def saved_login(server: str) -> Login | None:
    return load_logins().get(_normalise(server))


def resolve_server(server: str | None) -> str:
    """The server a command talks to: the one named (--server, PAI_SERVER), else the last one
    logged in to, else the embedded platform's default address."""
    if server:
        return _normalise(server)
    try:
        last = json.loads((config_dir() / CREDENTIALS_FILE).read_text()).get("last")
    except (OSError, ValueError, AttributeError):
        last = None
    return last if isinstance(last, str) and last else DEFAULT_SERVER


def _seconds(value: str | None) -> float | None:
    """Retry-After in seconds (the API sends seconds; an HTTP date is not used here)."""
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


def needs_tls(server: str) -> bool:
    """Whether requests to ``server`` need certificates checked: only https has any. A client
    made for plain http skips loading the CA bundle, which costs a `pai` call tens of ms; it
    sends only relative paths and follows no redirect, so it never reaches an https address."""
    return not server.lower().startswith("http://")


_json_dumps = json.dumps  # the module's name is a parameter's in PaiClient._send


def hint_of(body: dict[str, Any]) -> str | None:
    """The platform's advice beside OpenPAI's message in an error body, if it gave one."""
    hint = body.get("hint")
    return str(hint) if hint else None


def job_path(user: str, name: str) -> str:
    return f"/api/v2/jobs/{quote(user, safe='')}~{quote(name, safe='')}"


class Response:
    """What an API call answered: its status, headers and body (the part of httpx's response
    the commands read)."""

    def __init__(self, status_code: int, reason: str, headers: Message, content: bytes) -> None:
        self.status_code = status_code
        self.reason_phrase = reason
        self.headers = headers  # case-insensitive ``get``
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode(self.headers.get_content_charset() or "utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _tls_context() -> ssl.SSLContext:
    import ssl

    cafile = os.environ.get("SSL_CERT_FILE")
    if not cafile:
        try:
            import certifi

            cafile = certifi.where()
        except ImportError:
            cafile = None
    return ssl.create_default_context(cafile=cafile, capath=os.environ.get("SSL_CERT_DIR"))


class PaiClient:
    """Synchronous calls to one server; ``token`` is sent as a bearer when given."""

    def __init__(self, server: str, token: str | None = None, *, timeout: float = 15.0) -> None:
        import urllib.request

        self.server = _normalise(server)
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._timeout = timeout

        class _NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *_args: Any, **_kwargs: Any) -> None:
                return None  # a 3xx is the answer, as httpx gives it

        handlers: list[Any] = [_NoRedirect()]
        if needs_tls(self.server):
            handlers.append(urllib.request.HTTPSHandler(context=_tls_context()))
        self._opener = urllib.request.build_opener(*handlers)
        self._urllib = urllib.request

    def close(self) -> None:
        """Nothing is kept open between calls."""

    def __enter__(self) -> PaiClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        data: dict[str, Any] | None = None,
        json: Any = None,  # httpx's name for it, which the commands use
        content: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        import http.client
        import urllib.error

        url = self.server + path
        if params:
            url += ("&" if "?" in url else "?") + urlencode(params)
        sent = {**self._headers, **(headers or {})}
        body = content
        if data is not None:
            body = urlencode(data).encode()
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
        elif json is not None:
            body = _json_dumps(json).encode()
            sent.setdefault("Content-Type", "application/json")
        request = self._urllib.Request(url, data=body, headers=sent, method=method)
        try:
            with self._opener.open(request, timeout=self._timeout) as answer:
                return Response(answer.status, answer.reason, answer.headers, answer.read())
        except urllib.error.HTTPError as answer:  # 3xx, 4xx and 5xx: an answer all the same
            with answer:
                return Response(answer.code, str(answer.reason), answer.headers, answer.read())
        except (urllib.error.URLError, http.client.HTTPException, OSError) as exc:
            cause = getattr(exc, "reason", exc)
            raise ServerUnreachableError(
                f"cannot reach the platform at {self.server} ({type(cause).__name__}); "
                "is it running? Set --server or PAI_SERVER to its address."
            ) from None

    def _request(self, method: str, path: str, **kwargs: Any) -> Response:
        response = self._send(method, path, **kwargs)
        if response.status_code >= 400:
            try:
                body = response.json()
            except ValueError:
                body = {}
            if not isinstance(body, dict):
                body = {}
            code = str(body.get("code") or f"HTTP{response.status_code}")
            message = str(body.get("message") or response.text or response.reason_phrase)
            field = body.get("field")  # the marketplace names the field at fault
            if isinstance(field, str) and field and field not in message:
                message = f"{message} (field: {field})"
            raise ApiError(
                response.status_code,
                code,
                message,
                body.get("problems"),
                retry_after=_seconds(response.headers.get("Retry-After")),
                hint=hint_of(body),
            )
        return response

    def login(self, user: str, password: str) -> dict[str, Any]:
        response = self._request(
            "POST", "/api/v2/authn/basic/login", data={"username": user, "password": password}
        )
        result: dict[str, Any] = response.json()
        return result

    def submit(self, yaml_text: str) -> dict[str, Any]:
        response = self._request(
            "POST", "/api/v2/jobs", content=yaml_text.encode(), headers={"Content-Type": "text/yaml"}
        )
        result: dict[str, Any] = response.json()
        return result

    def list_jobs(self, **params: str | int) -> list[dict[str, Any]]:
        response = self._request("GET", "/api/v2/jobs", params={k: v for k, v in params.items() if v != ""})
        result: list[dict[str, Any]] = response.json()
        return result

    def job(self, user: str, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", job_path(user, name)).json()
        return result

    def job_config(self, user: str, name: str) -> str:
        """The job's protocol YAML as it was submitted (defaults filled in)."""
        return self._request("GET", job_path(user, name) + "/config").text

    def stop(self, user: str, name: str) -> dict[str, Any]:
        response = self._request("PUT", job_path(user, name) + "/executionType", json={"value": "STOP"})
        result: dict[str, Any] = response.json()
        return result

    def log(
        self,
        user: str,
        name: str,
        *,
        attempt: int,
        role: str,
        index: int,
        task_attempt: int = 0,
        file: str = "all",
        offset: int = 0,
        limit: int | None = None,
    ) -> dict[str, Any]:
        path = (
            f"{job_path(user, name)}/attempts/{attempt}/taskRoles/{quote(role, safe='')}"
            f"/taskIndex/{index}/attempts/{task_attempt}/logs/{file}"
        )
        params: dict[str, int] = {"offset": offset}
        if limit is not None:
            params["limit"] = limit
        result: dict[str, Any] = self._request("GET", path, params=params).json()
        return result

    def marketplace(self, method: str, path: str, **kwargs: Any) -> Response:
        """A call to the marketplace's API, which the platform serves under /marketplace/api."""
        return self._request(method, "/marketplace/api" + path, **kwargs)

    def failure_rules(self) -> tuple[str, int]:
        """The failure rules in force as YAML text, and their version (0: the packaged defaults)."""
        response = self._request("GET", "/api/v2/failure-rules")
        return response.text, int(response.headers.get("X-Failure-Rules-Version") or 0)

    def set_failure_rules(self, yaml_text: str) -> dict[str, Any]:
        response = self._request(
            "PUT", "/api/v2/failure-rules", content=yaml_text.encode(), headers={"Content-Type": "text/yaml"}
        )
        result: dict[str, Any] = response.json()
        return result

    def reset_failure_rules(self) -> dict[str, Any]:
        result: dict[str, Any] = self._request("DELETE", "/api/v2/failure-rules").json()
        return result

    def alert_rules(self) -> tuple[str, int, str]:
        """The alerting configuration in force as YAML text, its version and its source
        (``stored``, or ``built-in`` with version 0); admins only."""
        response = self._request("GET", "/api/v2/alert-rules")
        version = int(response.headers.get("X-Alert-Rules-Version") or 0)
        return response.text, version, response.headers.get("X-Alert-Rules-Source") or "stored"

    def set_alert_rules(self, yaml_text: str) -> dict[str, Any]:
        response = self._request(
            "PUT", "/api/v2/alert-rules", content=yaml_text.encode(), headers={"Content-Type": "text/yaml"}
        )
        result: dict[str, Any] = response.json()
        return result

    def virtual_clusters(self) -> dict[str, dict[str, Any]]:
        result: dict[str, dict[str, Any]] = self._request("GET", "/api/v2/virtual-clusters").json()
        return result

    def virtual_cluster(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request(
            "GET", f"/api/v2/virtual-clusters/{quote(name, safe='')}"
        ).json()
        return result

    def sku_types(self, vc: str = "") -> dict[str, dict[str, Any]]:
        params = {"vc": vc} if vc else {}
        response = self._request("GET", "/api/v2/cluster/sku-types", params=params)
        result: dict[str, dict[str, Any]] = response.json()
        return result

    def set_vc(self, name: str, asked: dict[str, Any], *, force: bool = False) -> dict[str, Any]:
        """Create or resize one VC (admin): `{"gpus", "model", "cells", "cpu", "memoryMB"}`."""
        response = self._request(
            "PUT",
            f"/api/v2/virtual-clusters/{quote(name, safe='')}",
            params={"force": "true"} if force else {},
            json=asked,
        )
        result: dict[str, Any] = response.json()
        return result

    def remove_vc(self, name: str, *, force: bool = False) -> dict[str, Any]:
        response = self._request(
            "DELETE",
            f"/api/v2/virtual-clusters/{quote(name, safe='')}",
            params={"force": "true"} if force else {},
        )
        result: dict[str, Any] = response.json()
        return result

    def usage(self, by: str, since: str, until: str | None = None) -> dict[str, Any]:
        """GPU-hours, CPU-hours, jobs by final state and mean wait per user or VC (yours, unless admin)."""
        params = {"by": by, "from": since, **({"to": until} if until else {})}
        result: dict[str, Any] = self._request("GET", "/api/v2/usage", params=params).json()
        return result

    def vc_config(self) -> dict[str, Any]:
        """The scheduler config in force (admin): `config`, its `yaml`, `cells` and `notes`."""
        result: dict[str, Any] = self._request("GET", "/api/v2/virtual-clusters/config").json()
        return result

    def set_vc_config(self, yaml_text: str, *, force: bool = False) -> dict[str, Any]:
        """Replace VCs, cells or user limits (admin); a harmful change raises ApiError 409."""
        response = self._request(
            "PUT",
            "/api/v2/virtual-clusters/config",
            params={"force": "true"} if force else {},
            content=yaml_text.encode(),
            headers={"Content-Type": "text/yaml"},
        )
        result: dict[str, Any] = response.json()
        return result
