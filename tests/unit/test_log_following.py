"""Following a log without a server: windows end on whole characters, a follower reads each byte
once, waits its interval while nothing is new, obeys 429's Retry-After and restarts on a new attempt."""

from __future__ import annotations

from typing import Any, cast

import pytest

from pai.cli.client import ApiError, PaiClient
from pai.cli.following import LogFollower, LogTarget
from services.orchestrator.adapters.logs import window


@pytest.mark.parametrize(
    ("data", "whole"),
    [
        pytest.param(b"abc", 3, id="ascii"),
        pytest.param("aé".encode(), 3, id="ends-on-a-whole-two-byte-character"),
        pytest.param("aé".encode()[:2], 1, id="cut-inside-a-two-byte-character"),
        pytest.param("a€".encode()[:3], 1, id="cut-inside-a-three-byte-character"),
        pytest.param("a🙂".encode()[:4], 1, id="cut-inside-a-four-byte-character"),
        pytest.param(b"a\xff", 2, id="a-stray-byte-is-passed-on"),
    ],
)
def test_a_window_ends_on_a_whole_character(data: bytes, whole: int) -> None:
    reply = window(data, 10, 100)
    assert reply["nextOffset"] == 10 + whole
    assert reply["offset"] == 10
    assert reply["content"] == data[:whole].decode(errors="replace")


def test_a_file_that_ends_inside_a_character_is_still_read_to_its_end() -> None:
    assert window(b"\xc3", 5, 6)["nextOffset"] == 6


class FakeApi:
    """A job whose task's log grows by the scripted pieces, one per status look."""

    def __init__(self, growth: list[bytes], states: list[str], attempts: list[int] | None = None) -> None:
        self.growth = growth
        self.states = states
        self.attempts = attempts or [0] * len(states)
        self.looks = 0
        self.logs: dict[int, bytes] = {}
        self.reads: list[tuple[int, int]] = []
        self.refusals = 0

    def job(self, user: str, name: str) -> dict[str, Any]:
        if self.refusals:
            self.refusals -= 1
            raise ApiError(429, "TooManyRequestsError", "Too many requests", retry_after=7)
        look = min(self.looks, len(self.states) - 1)
        attempt = self.attempts[look]
        if self.looks < len(self.growth):
            self.logs[attempt] = self.logs.get(attempt, b"") + self.growth[self.looks]
        self.looks += 1
        task = {"taskIndex": 0, "taskState": self.states[look], "attemptId": 0, "containerNodeName": "vm"}
        return {
            "jobStatus": {"state": "RUNNING", "attemptId": attempt},
            "taskRoles": {"main": {"taskStatuses": [task]}},
        }

    def log(self, user: str, name: str, *, attempt: int, offset: int, limit: int, **_: Any) -> dict[str, Any]:
        self.reads.append((attempt, offset))
        data = self.logs.get(attempt, b"")
        return window(data[offset : offset + 4], offset, len(data))  # small windows: several reads


def follow(api: FakeApi) -> tuple[str, list[float], list[str]]:
    written: list[str] = []
    slept: list[float] = []
    notes: list[str] = []
    follower = LogFollower(
        cast(PaiClient, api),
        LogTarget(user="u", name="j", role=None, index=0),
        write=written.append,
        note=notes.append,
        sleep=slept.append,
    )
    follower.run(follow=True, interval=0.5)
    return "".join(written), slept, notes


def test_a_follower_prints_each_byte_once_and_sleeps_only_while_nothing_is_new() -> None:
    api = FakeApi(
        growth=[b"one\n", b"", "tw\u00e9\n".encode(), b"", b"three\n"],
        states=["RUNNING", "RUNNING", "RUNNING", "RUNNING", "SUCCEEDED"],
    )
    text, slept, notes = follow(api)
    assert text == "one\ntw\u00e9\nthree\n"
    assert slept == [0.5] * 4, "one sleep per look at the task, none while catching up"
    assert notes == []
    offsets = [offset for _, offset in api.reads]
    assert offsets == sorted(offsets), "never reads back"


def test_a_429_waits_its_retry_after_and_goes_on() -> None:
    api = FakeApi(growth=[b"hello\n"], states=["SUCCEEDED"])
    api.refusals = 2
    text, slept, notes = follow(api)
    assert text == "hello\n"
    assert slept == [7, 7]
    assert len(notes) == 2
    assert "slow down" in notes[0]


def test_a_new_attempt_is_read_from_its_beginning() -> None:
    api = FakeApi(
        growth=[b"first try\n", b"second try\n"],
        states=["RUNNING", "SUCCEEDED"],
        attempts=[0, 1],
    )
    text, _, notes = follow(api)
    assert text == "first try\nsecond try\n"
    assert notes == ["task main[0] started again (attempt 1.0)"]


class WaitingApi(FakeApi):
    """The same job, its task waiting for the first looks (with a reason that changes once)."""

    def __init__(self, reasons: list[str], growth: list[bytes], states: list[str]) -> None:
        super().__init__(growth, states)
        self.reasons = reasons

    def job(self, user: str, name: str) -> dict[str, Any]:
        if self.reasons:
            reason = self.reasons.pop(0)
            task = {"taskIndex": 0, "taskState": "WAITING", "attemptId": 0, "containerNodeName": None}
            return {
                "jobStatus": {"state": "WAITING", "attemptId": 0, "pendingReason": reason},
                "taskRoles": {"main": {"taskStatuses": [task]}},
            }
        return super().job(user, name)


def test_following_a_waiting_task_says_what_it_waits_for_then_follows_its_log() -> None:
    api = WaitingApi(
        ["VC default is full", "VC default is full", "2 jobs ahead"], [b"hello\n"], ["SUCCEEDED"]
    )
    text, _, notes = follow(api)
    assert notes == [
        "task main[0] has not started yet (WAITING: VC default is full); its log follows once it starts",
        "task main[0] has not started yet (WAITING: 2 jobs ahead); its log follows once it starts",
    ]
    assert text == "hello\n"
