"""Pinning a job's images to the digests its tasks ran."""

from __future__ import annotations

import pytest

from libs.protocol.pinning import PinningError, digests_by_role, pin_images

CONFIG = {
    "protocolVersion": 2,
    "name": "train",
    "prerequisites": [
        {"name": "img", "type": "dockerimage", "uri": "pytorch/pytorch:latest"},
        {"name": "data", "type": "data", "uri": ["/d"]},
    ],
    "taskRoles": {"a": {"dockerImage": "img"}, "b": {"dockerImage": "img"}},
}
A = "docker.io/pytorch/pytorch@sha256:" + "a" * 64
B = "docker.io/pytorch/pytorch@sha256:" + "b" * 64


def _detail(**by_role: str | None) -> dict[str, object]:
    return {
        "taskRoles": {
            role: {"taskStatuses": [{"taskIndex": 0, "imageDigest": digest}]}
            for role, digest in by_role.items()
        }
    }


def test_roles_sharing_an_image_get_the_digest_they_ran() -> None:
    pinned = pin_images(CONFIG, digests_by_role(_detail(a=A, b=A)))
    assert pinned["prerequisites"][0]["uri"] == A
    assert len(pinned["prerequisites"]) == 2  # one image prerequisite still, not one per role
    assert pinned["taskRoles"]["b"]["dockerImage"] == "img"
    assert pinned["prerequisites"][1] == CONFIG["prerequisites"][1]  # type: ignore[index]
    assert CONFIG["prerequisites"][0]["uri"] == "pytorch/pytorch:latest"  # type: ignore[index]


def test_a_tag_that_moved_between_roles_splits_the_prerequisite() -> None:
    pinned = pin_images(CONFIG, digests_by_role(_detail(a=A, b=B)))
    uris = {p["name"]: p.get("uri") for p in pinned["prerequisites"]}
    assert uris["img"] == A
    assert uris["img-b"] == B
    assert pinned["taskRoles"]["b"]["dockerImage"] == "img-b"
    assert pinned["taskRoles"]["a"]["dockerImage"] == "img"


def test_a_role_that_ran_no_container_keeps_its_image_and_the_others_are_pinned() -> None:
    config = {**CONFIG, "taskRoles": {"a": {"dockerImage": "other"}, "b": {"dockerImage": "img"}}}
    pinned = pin_images(config, digests_by_role(_detail(a=A, b=B)))
    assert pinned["prerequisites"][0]["uri"] == B  # a names no image prerequisite: skipped, b pinned


def test_a_job_that_ran_on_the_host_cannot_be_pinned() -> None:
    with pytest.raises(PinningError, match=r"^the job's detail names no image digest"):
        pin_images(CONFIG, digests_by_role(_detail(a=None, b=None)))


def test_a_digest_that_is_not_text_is_no_digest() -> None:
    detail = {
        "taskRoles": {"a": {"taskStatuses": [{"imageDigest": 7}, {"imageDigest": ""}, {"imageDigest": A}]}}
    }
    assert digests_by_role(detail) == {"a": A}


def test_a_job_without_prerequisites_is_returned_with_an_empty_list() -> None:
    pinned = pin_images({"name": "x", "taskRoles": {"a": {"dockerImage": "img"}}}, {"a": A})
    assert pinned == {"name": "x", "taskRoles": {"a": {"dockerImage": "img"}}, "prerequisites": []}


def test_a_split_prerequisite_shares_nothing_with_the_one_it_came_from() -> None:
    config = {
        "prerequisites": [{"name": "img", "type": "dockerimage", "uri": "x:1", "auth": {"username": "u"}}],
        "taskRoles": {"a": {"dockerImage": "img"}, "b": {"dockerImage": "img"}},
    }
    first, split = pin_images(config, {"a": A, "b": B})["prerequisites"]
    assert split == {"name": "img-b", "type": "dockerimage", "uri": B, "auth": {"username": "u"}}
    split["auth"]["username"] = "changed"
    assert first["auth"] == {"username": "u"}
