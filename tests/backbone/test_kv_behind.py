"""A whole read of a KV bucket served by a server still catching up (back from a freeze): it
comes back without the bucket's newest revision, which the stream's leader knows. It is read
again until it has it (a takeover that read a short notification log sent everything again)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from libs.backbone import kv as kv_module
from libs.backbone.kv import current_entries
from tests.support.fake_kv import FakeKV, FakeWatcher, entry


class Leader:
    """The stream's leader: its newest sequence, asked for by stream name."""

    def __init__(self, last_seq: int, messages: int = 1) -> None:
        self.state = SimpleNamespace(last_seq=last_seq, messages=messages)
        self.asked: list[str] = []

    async def stream_info(self, name: str) -> Any:
        self.asked.append(name)
        return SimpleNamespace(state=self.state)


def bucket(leader: Leader, *reads: list[Any]) -> FakeKV:
    fake = FakeKV()
    fake._js = leader  # type: ignore[attr-defined]
    fake._stream = "KV_pai_notifications"  # type: ignore[attr-defined]
    fake.watchers = [FakeWatcher(items) for items in reads]
    return fake


FULL = [entry("a", b"1", 3, delta=2), entry("b", b"2", 7, delta=1), entry("c", None, 9, operation="DEL")]


async def test_a_read_behind_the_stream_is_read_again_until_it_has_the_newest_revision() -> None:
    leader = Leader(last_seq=9)
    fake = bucket(
        leader, [entry("a", b"1", 3), None], [entry("a", b"1", 3, delta=1), entry("b", b"2", 7)], FULL
    )
    found = await current_entries(fake.as_kv())
    assert sorted(found) == ["a", "b"]  # c's newest revision is its deletion: read, and gone
    assert leader.asked == ["KV_pai_notifications"]
    assert len(fake.watch_calls) == 3
    assert fake.watchers == []


async def test_a_read_that_stays_behind_is_a_timeout_for_the_caller_to_try_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kv_module, "_BEHIND_PATIENCE", 0.0)
    fake = bucket(Leader(last_seq=9), [entry("a", b"1", 3), None])
    with pytest.raises(TimeoutError, match="revision 3 of 9"):
        await current_entries(fake.as_kv())


async def test_an_empty_stream_a_pattern_and_a_bucket_of_no_server_are_read_once() -> None:
    empty = bucket(Leader(last_seq=40, messages=0), [None])  # everything expired: nothing to have
    assert await current_entries(empty.as_kv()) == {}
    pattern = bucket(Leader(last_seq=9), [entry("a", b"1", 3), None])  # the newest may be another's
    assert sorted(await current_entries(pattern.as_kv(), "a")) == ["a"]
    assert pattern.watch_calls[0][0] == "a"
    plain = FakeKV()
    plain.watchers = [FakeWatcher([entry("a", b"1", 3), None])]
    assert sorted(await current_entries(plain.as_kv())) == ["a"]
