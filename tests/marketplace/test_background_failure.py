"""The marketplace's use counter that raises stops the marketplace with its error, for `pai up`
or Kubernetes to start it again, instead of failing unseen while items go on being served."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from libs.backbone.connecting import Bus
from libs.backbone.natsserver import EmbeddedNats
from services.marketplace import app as marketplace_app
from services.marketplace.adapters.storing import Store
from tests.marketplace.support import settings

pytestmark = pytest.mark.timeout(60)


async def test_a_use_counter_that_raises_ends_the_marketplace_with_its_error(
    topology: Bus,
    nats_server: EmbeddedNats,
    rest_url: str,
    database_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def count_uses(js: object, store: Store, stop: asyncio.Event) -> None:
        raise LookupError("a bug planted in the use counter")

    monkeypatch.setattr(marketplace_app, "count_uses", count_uses)
    config = settings(
        nats_server.url, rest_url, database_url, tmp_path, marketplace_host="127.0.0.1", marketplace_port=0
    )
    stop = asyncio.Event()
    with pytest.raises(ExceptionGroup) as raised:
        await asyncio.wait_for(marketplace_app.serve(config, stop), timeout=30)
    assert raised.group_contains(LookupError, match="a bug planted in the use counter")
    assert not stop.is_set()
