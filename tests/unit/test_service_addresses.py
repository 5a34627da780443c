"""Service URLs on one machine or between hosts (libs/web/addresses.py), and the sockets' directory.

A service's URL setting is http(s):// (Kubernetes, compose) or unix:/// a socket file; anything
else is refused when the settings are read, saying which forms there are. The sockets' directory
is the platform user's alone: one made by someone else, or a link, is refused; a data dir too
deep for a socket's path gets a private temporary one.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from pydantic import ValidationError

from libs.web.addresses import (
    AddressError,
    base_url,
    check_socket_path,
    private_directory,
    socket_path,
    unix_url,
)
from pai.embedded.platform import EmbeddedPlatform
from services.events.settings import EventsSettings
from services.portal.settings import PortalSettings
from services.rest.settings import RestSettings


def test_urls_name_a_host_or_a_socket_file() -> None:
    assert socket_path("http://rest:9186") is None
    assert base_url("http://rest:9186/") == "http://rest:9186"
    assert socket_path("unix:///run/pai/rest.sock") == "/run/pai/rest.sock"
    assert base_url("unix:///run/pai/rest.sock") == "http://localhost"
    assert unix_url(Path("/run/pai/rest.sock")) == "unix:///run/pai/rest.sock"
    for wrong in ("unix://run/pai/rest.sock", "unix:relative.sock", "ftp://x", "127.0.0.1:9186"):
        with pytest.raises(AddressError):
            socket_path(wrong)


def test_settings_refuse_a_url_of_another_form_at_start() -> None:
    with pytest.raises(ValidationError, match="unix:///absolute"):
        RestSettings(marketplace_url="unix://relative.sock")
    with pytest.raises(ValidationError, match="not an http"):
        PortalSettings(portal_rest_url="rest:9186")
    assert EventsSettings(rest_url="unix:///x/rest.sock").rest_url == "unix:///x/rest.sock"
    assert RestSettings(events_url="").events_url == ""  # not named: no gateway


def test_a_socket_path_the_kernel_cannot_take_is_refused_naming_the_limit(tmp_path: Path) -> None:
    check_socket_path(tmp_path / "rest.sock")
    with pytest.raises(AddressError, match="107"):
        check_socket_path(tmp_path / ("x" * 120) / "rest.sock")


def test_the_sockets_directory_is_made_private_and_a_link_or_a_file_is_refused(tmp_path: Path) -> None:
    made = private_directory(tmp_path / "sockets")
    assert made.stat().st_mode & 0o777 == 0o700
    os.chmod(made, 0o755)
    private_directory(made)
    assert made.stat().st_mode & 0o777 == 0o700  # tightened again
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(AddressError, match="link"):
        private_directory(tmp_path / "link")
    (tmp_path / "file").write_text("")
    with pytest.raises(AddressError):
        private_directory(tmp_path / "file")


@pytest.mark.skipif(os.geteuid() != 0, reason="a directory of another user needs root to make")
def test_a_sockets_directory_of_another_user_is_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "sockets"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)
    with pytest.raises(AddressError, match="belongs to uid 65534"):
        private_directory(theirs)


def test_a_data_dir_too_deep_for_socket_paths_gets_a_private_temporary_directory(tmp_path: Path) -> None:
    shallow = EmbeddedPlatform(tmp_path / "data")
    assert shallow._sockets_dir() == tmp_path.resolve() / "data" / "sockets"
    deep = EmbeddedPlatform(tmp_path / ("d" * 100) / "data")
    sockets = deep._sockets_dir()
    assert not sockets.is_relative_to(tmp_path)
    assert sockets.stat().st_mode & 0o777 == 0o700
    check_socket_path(sockets / "marketplace.sock")
    asyncio.run(deep.stop())
    assert not sockets.exists()  # made for one run only
