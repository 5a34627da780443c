"""Per-user GPU limits in a VC as a user meets them: the whole reason a job over its limit waits,
shares counted as the whole GPUs they add up to, CPU-only jobs never held back, room given back
on release and after a restart, and each refused limits document with its whole message."""

from __future__ import annotations

from typing import Any

import pytest

from services.scheduler.core.hived import HivedPolicy
from services.scheduler.core.placements import JobDemand, NodeInventory, Placed, TaskDemand, Waiting
from services.scheduler.core.user_limits import (
    UserLimitedPolicy,
    UserLimitsError,
    VcUserLimit,
    parse_user_limits,
    user_limits_document,
)
from tests.scheduler.clusters import two_rack_config


def job(job_id: str, gpus: int, user: str = "alice", tasks: int = 1, vc: str = "a") -> JobDemand:
    return JobDemand(job_id, user, vc, 0, tuple(TaskDemand("w", i, 1, 1024, gpus) for i in range(tasks)))


def shared(job_id: str, *millis: int, user: str = "alice") -> JobDemand:
    parts = tuple(TaskDemand("s", i, 1, 1024, 1, gpu_milli=m) for i, m in enumerate(millis))
    return JobDemand(job_id, user, "a", 0, parts)


def limited(limits: dict[str, Any]) -> UserLimitedPolicy:
    policy = UserLimitedPolicy(HivedPolicy(two_rack_config()), parse_user_limits(limits))
    policy.set_nodes([NodeInventory(f"n{i}", f"10.0.0.{i}", 16, 65536, 4, "A100") for i in range(4)])
    return policy


def test_a_job_over_the_limit_waits_with_the_whole_reason() -> None:
    policy = limited({"a": {"maxGpusPerUser": 3}})
    assert isinstance(policy.decide(job("first", 2)), Placed)
    assert policy.decide(job("second", 2)) == Waiting(
        "second",
        "user alice may use at most 3 GPUs at once in VC a (userLimits.a.maxGpusPerUser); 2 are in use "
        "by their running jobs and this job needs 2; it starts when enough of them finish",
    )
    assert isinstance(policy.decide(job("third", 1)), Placed)  # exactly up to the limit


def test_shares_count_as_the_whole_gpus_they_add_up_to_rounded_up() -> None:
    policy = limited({"a": {"maxGpusPerUser": 3}})
    assert isinstance(policy.decide(shared("thirds", 667, 667, 667)), Placed)
    assert policy.usage() == {"a": {"alice": 3}}
    assert isinstance(policy.decide(shared("more", 100)), Waiting)


def test_a_limit_of_zero_holds_back_gpu_jobs_but_never_cpu_only_ones() -> None:
    policy = limited({"a": {"maxGpusPerUser": 0}})
    assert isinstance(policy.decide(job("gpu", 1)), Waiting)
    assert isinstance(policy.decide(job("cpu", 0)), Placed)
    full = limited({"a": {"maxGpusPerUser": 1}})
    assert isinstance(full.decide(job("gpu", 1)), Placed)
    assert isinstance(full.decide(job("cpu", 0)), Placed)


def test_each_users_jobs_add_up_and_release_gives_the_gpus_back_to_the_cluster() -> None:
    policy = limited({"a": {"maxGpusPerUser": 8}})
    assert isinstance(policy.decide(job("one", 4)), Placed)
    assert isinstance(policy.decide(job("two", 2)), Placed)
    assert isinstance(policy.decide(job("bob", 1, user="bob")), Placed)
    assert policy.usage() == {"a": {"alice": 6, "bob": 1}}
    policy.release("one")
    policy.release("never-placed")
    assert policy.usage() == {"a": {"alice": 2, "bob": 1}}
    assert isinstance(policy.decide(job("again", 4)), Placed)  # its devices are free again


def test_a_restored_job_counts_against_its_user() -> None:
    first = limited({"a": {"maxGpusPerUser": 4}})
    demand = job("run", 4)
    placed = first.decide(demand)
    assert isinstance(placed, Placed)
    again = limited({"a": {"maxGpusPerUser": 4}})
    again.restore(demand, placed)
    assert again.usage() == {"a": {"alice": 4}}
    assert isinstance(again.decide(job("more", 1)), Waiting)


def test_a_vc_may_name_users_without_a_default() -> None:
    limits = parse_user_limits({"a": {"users": {"alice": 2}}})
    assert limits == {"a": VcUserLimit(None, {"alice": 2})}
    assert user_limits_document(limits) == {"a": {"users": {"alice": 2}}}
    both = {"a": {"maxGpusPerUser": 0, "users": {"bob": 3}}}
    assert user_limits_document(parse_user_limits(both)) == both


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "userLimits: must map VC names to {maxGpusPerUser: N, users: {name: N}}"),
        ({"a": 4}, "userLimits.a: must be a mapping like {maxGpusPerUser: 4}"),
        ({"a": {"users": ["alice"]}}, "userLimits.a.users: must map user names to GPU counts"),
        (
            {"a": {"users": {"alice": -1}}},
            "userLimits.a.users.alice: must be a whole number of GPUs (0 or more), got -1",
        ),
        (
            {"a": {"maxGpusPerUser": True}},
            "userLimits.a.maxGpusPerUser: must be a whole number of GPUs (0 or more), got True",
        ),
    ],
    ids=["not-a-mapping", "vc-not-a-mapping", "users-not-a-mapping", "negative", "boolean"],
)
def test_a_bad_limits_document_is_refused_naming_the_field(doc: Any, message: str) -> None:
    with pytest.raises(UserLimitsError) as caught:
        parse_user_limits(doc)
    assert str(caught.value) == message


def test_a_user_over_a_lowered_limit_still_runs_cpu_only_jobs() -> None:
    first = limited({"a": {"maxGpusPerUser": 4}})
    demand = job("run", 4)
    placed = first.decide(demand)
    assert isinstance(placed, Placed)
    lowered = limited({"a": {"maxGpusPerUser": 1}})
    lowered.restore(demand, placed)
    assert isinstance(lowered.decide(job("cpu", 0)), Placed)
    assert isinstance(lowered.decide(job("gpu", 1)), Waiting)
