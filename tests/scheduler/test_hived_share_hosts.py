"""The bookkeeping of shared-GPU hosts inside HiveD (services/scheduler/core/hived/shares.py):
finding a host by device, forgetting one, the jobs on one, and which host a share goes to."""

from __future__ import annotations

from services.scheduler.core.gpu_share import MAX_GPUS, ShareDemand
from services.scheduler.core.hived.groups import BindInfo, PodSpec
from services.scheduler.core.hived.shares import NodeRoom, PoolKey, ShareHost, ShareHosts

POOL: PoolKey = ("vc1", 0, "GPU", "")
OTHER: PoolKey = ("vc2", 0, "GPU", "")
ROOMY = NodeRoom(cpu=32, memory_mb=1 << 20)


def host(name: str, node: str, device: int, used: int = 0, pool: PoolKey = POOL) -> ShareHost:
    spec = PodSpec(name, pool[0], pool[1], 1, name, ((1, 1),))
    shared = ShareHost(name, pool, node, device, spec, BindInfo(node, (device,), "chain", ()))
    if used:
        shared.tenants[(f"job-{name}", "worker", 0)] = used
    return shared


def hosts(*members: ShareHost) -> ShareHosts:
    book = ShareHosts()
    for member in members:
        book.add_host(member)
    return book


def test_a_host_is_found_by_its_node_and_device_and_forgotten_when_removed() -> None:
    first = host("h1", "n1", 0)
    book = hosts(first, host("h2", "n1", 1))
    assert book.host_at("n1", 0) is first
    assert book.host_at("n1", 2) is None
    assert book.host_at("n2", 0) is None
    book.remove_host(first)
    assert book.host_at("n1", 0) is None
    assert set(book.hosts) == {"h2"}
    assert book.host_at("n1", 1) is book.hosts["h2"]
    book.remove_host(first)  # twice: nothing left to forget, nothing else forgotten
    assert set(book.hosts) == {"h2"}


def test_removing_a_host_whose_device_has_a_new_host_keeps_the_new_one() -> None:
    old, new = host("old", "n1", 0), host("new", "n1", 0)
    book = hosts(old, new)  # the device went to a new host before the old one was removed
    book.remove_host(old)
    assert book.host_at("n1", 0) is new
    assert set(book.hosts) == {"new"}


def test_the_jobs_on_a_host_are_its_tenants_jobs() -> None:
    shared = host("h1", "n1", 0)
    shared.tenants[("a", "worker", 0)] = 200
    shared.tenants[("a", "worker", 1)] = 200
    shared.tenants[("b", "ps", 0)] = 300
    book = hosts(shared)
    assert book.jobs_on("h1") == {"a", "b"}
    assert book.jobs_on("h9") == set()
    assert shared.used_milli == 700
    assert shared.free_milli == 300


def test_a_share_goes_only_to_a_host_of_its_pool_with_room_on_a_node_that_has_room() -> None:
    book = hosts(host("full", "n1", 0, used=800), host("other", "n2", 0, pool=OTHER), host("far", "n3", 0))
    rooms = {"n1": ROOMY, "n2": ROOMY}  # n3 has no room left for another task
    assert book.choose(POOL, 300, 1, 128, rooms, []) is None
    exact = book.choose(POOL, 200, 1, 128, rooms, [])  # exactly what is free fits
    assert exact is not None
    assert exact.name == "full"
    assert book.choose(POOL, 201, 1, 128, rooms, []) is None
    assert book.choose(POOL, 200, 1, 128, {"n1": NodeRoom(cpu=0, memory_mb=1 << 20)}, []) is None
    assert book.choose(POOL, 200, 1, 128, {"n1": NodeRoom(cpu=32, memory_mb=64)}, []) is None


def test_the_policy_packs_a_share_onto_the_fuller_device() -> None:
    book = hosts(host("emptier", "n1", 0, used=100), host("fuller", "n1", 1, used=600))
    chosen = book.choose(POOL, 400, 1, 128, {"n1": ROOMY}, [ShareDemand(1000, 128, 1, 400)])
    assert chosen is not None
    assert chosen.name == "fuller"


def test_more_hosts_on_one_node_than_a_node_has_gpus_are_all_considered() -> None:
    members = [host(f"h{d}", "n1", d, used=900) for d in range(MAX_GPUS)]
    last = host(f"h{MAX_GPUS}", "n1", MAX_GPUS, used=500)
    book = hosts(*members, last)
    chosen = book.choose(POOL, 400, 1, 128, {"n1": ROOMY}, [])
    assert chosen is last
    # The node's room is what each group of its hosts may use.
    assert book.choose(POOL, 400, 64, 128, {"n1": ROOMY}, []) is None


def test_each_node_answers_for_its_own_hosts_room() -> None:
    book = hosts(host("tight", "n1", 0, used=500), host("roomy", "n2", 0, used=500))
    rooms = {"n1": NodeRoom(cpu=1, memory_mb=1 << 20), "n2": NodeRoom(cpu=4, memory_mb=1 << 20)}
    chosen = book.choose(POOL, 400, 4, 128, rooms, [])
    assert chosen is not None
    assert chosen.name == "roomy"  # n1 has one core left; exactly the four asked for fit on n2
    assert book.choose(POOL, 400, 5, 128, rooms, []) is None
