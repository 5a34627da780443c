"""A background task of REST that raises stops the service with its error; a stop ends it cleanly.

REST serves requests while its background tasks (the projection, the republisher, the VC names'
watch, the heartbeat, the copy of users' addresses) run in one task group. A bug in one of them
must not leave the API up without it: the service ends with the error, for `pai up` (see
tests/e2e/test_service_failure.py) or Kubernetes to start it again.
"""

from __future__ import annotations

import asyncio

import pytest

from services.rest.adapters import vc_names
from services.rest.app import serve
from services.rest.settings import RestSettings
from tests.support.waiting import eventually, polled

pytestmark = pytest.mark.timeout(60)


def running() -> set[str]:
    return {task.get_name() for task in asyncio.all_tasks()}


def on_a_free_port(settings: RestSettings) -> RestSettings:
    return settings.model_copy(update={"rest_host": "127.0.0.1", "rest_port": 0})


async def test_a_background_task_that_raises_ends_the_service_with_its_error(
    rest_settings: RestSettings, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def watch(self: vc_names.VirtualClusterNames) -> None:
        raise LookupError("a bug planted in the VC names' watch")

    monkeypatch.setattr(vc_names.VirtualClusterNames, "watch", watch)
    stop = asyncio.Event()
    with pytest.raises(ExceptionGroup) as raised:
        await asyncio.wait_for(serve(on_a_free_port(rest_settings), stop), timeout=30)
    assert raised.group_contains(LookupError, match="a bug planted in the VC names' watch")
    assert not stop.is_set()


async def test_a_stop_ends_the_service_and_its_background_tasks(rest_settings: RestSettings) -> None:
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(on_a_free_port(rest_settings), stop))
    await eventually(polled(running), lambda names: "projection" in names or serving.done(), within=30)
    assert not serving.done(), serving.exception()
    stop.set()
    await asyncio.wait_for(serving, timeout=10)
    assert running() & {"projection", "unpublished", "heartbeat", "vc-names", "background"} == set()
