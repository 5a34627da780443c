"""The lines `pai job watch`, `--wait` and `pai events` print: a task retried on its own (gang
allocation off) is told apart from its first try, never 'attempt 0' twice."""

from __future__ import annotations

from pai.cli.streaming import describe

STARTED = {"role": "main", "index": 0, "node": "n1", "attempt": 0}


def test_a_tasks_first_try_is_its_jobs_attempt() -> None:
    assert (
        describe("task.started", {**STARTED, "task_attempt": 0}) == "task main[0] started on n1 (attempt 0)"
    )


def test_a_task_retried_on_its_own_says_which_retry() -> None:
    first = describe("task.started", {**STARTED, "task_attempt": 0})
    again = describe("task.started", {**STARTED, "task_attempt": 1})
    assert again == "task main[0] started on n1 (attempt 0, task retry 1)"
    assert first != again
    ended = describe("task.completed", {**STARTED, "task_attempt": 1, "exit_code": 3})
    assert ended == "task main[0] exited with code 3 (attempt 0, task retry 1)"
