"""Where one service reaches another over HTTP: a TCP address, or a Unix socket on this machine.

A URL in a service's settings (``PAI_MARKETPLACE_URL``, ``PAI_EVENTS_URL``, ``PAI_REST_URL``,
``PAI_PORTAL_REST_URL``) is either ``http(s)://host:port[/prefix]``, as between pods on
Kubernetes or containers in docker-compose, or ``unix:///absolute/path.sock``: the socket file
of a service on the same machine. The embedded platform (`pai up`) uses sockets for every hop
between its services: a TCP port on 127.0.0.1 is free for any local process to bind while the
service behind it restarts, and tasks are local processes, so a task that took the port would
receive what the next service sent there (the users' bearer tokens). A socket lives in a
directory only the platform's user may enter (``private_directory``), so no other user can
connect to it, replace it or listen in its place.

``client_session`` opens the aiohttp session a URL needs (a Unix connector for a socket) and
``base_url`` gives what requests start with; ``serving.py`` listens on either kind.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp

UNIX_SCHEME = "unix"
# What a request over a socket names as its host (the Host header); the socket decides where it goes.
SOCKET_HOST = "http://localhost"
# sun_path is 108 bytes on Linux, with a terminating NUL.
MAX_SOCKET_PATH = 107


class AddressError(ValueError):
    """A service URL the platform cannot use; says what to write instead."""


def unix_url(path: Path | str) -> str:
    """The URL naming the socket file at ``path`` (absolute)."""
    return f"{UNIX_SCHEME}://{Path(path).resolve()}"


def socket_path(url: str) -> str | None:
    """The socket file a ``unix://`` URL names; None for an http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme == UNIX_SCHEME:
        if parts.netloc or not parts.path.startswith("/"):
            raise AddressError(f"{url!r}: a socket URL is unix:///absolute/path.sock (three slashes)")
        return parts.path
    if parts.scheme in ("http", "https") and parts.netloc:
        return None
    raise AddressError(f"{url!r} is not an http(s):// or unix:/// URL")


def base_url(url: str) -> str:
    """What a request's URL starts with: the http(s) URL itself, or a fixed host over a socket."""
    return SOCKET_HOST if socket_path(url) is not None else url.rstrip("/")


def connector(url: str, **options: Any) -> aiohttp.BaseConnector:
    """The connector reaching ``url``: to its socket file, or TCP (``options`` go to either)."""
    path = socket_path(url)
    if path is not None:
        return aiohttp.UnixConnector(path=path, **options)
    return aiohttp.TCPConnector(**options)


def client_session(
    url: str, *, connector_options: dict[str, Any] | None = None, **options: Any
) -> aiohttp.ClientSession:
    """An aiohttp session for requests to ``url`` (build each request's URL with ``base_url``).

    A session over a socket reaches that socket only, whatever host a request names: one session
    per service it talks to.
    """
    return aiohttp.ClientSession(connector=connector(url, **(connector_options or {})), **options)


def check_socket_path(path: Path) -> None:
    """Refuse a socket path longer than the kernel accepts, naming the limit."""
    if len(os.fsencode(path)) > MAX_SOCKET_PATH:
        raise AddressError(
            f"the socket path {path} is {len(os.fsencode(path))} bytes, over the {MAX_SOCKET_PATH} "
            "a Unix socket may have"
        )


def private_directory(path: Path) -> Path:
    """``path`` as a directory only this user may enter (0700, owned by us, not a link); made if absent.

    A directory someone else made, or one that is a symbolic link, is refused rather than used:
    whoever owns it could put their own socket where a service expects another's.
    """
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=0o700, parents=True)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise AddressError(f"{path} should be a directory of sockets, but is not one (a link or a file)")
    if info.st_uid != os.geteuid():
        raise AddressError(f"{path} belongs to uid {info.st_uid}, not to this user; remove it")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path
