"""Every starter template is a valid job with an item description and a README."""

from __future__ import annotations

import pytest

from libs.protocol.validation import parse_job
from tests.marketplace.starters import Starter, starters

# The patterns the issue asks the marketplace to start with, by folder.
REQUIRED = {
    "hello-world",
    "pytorch-ddp",
    "tensorflow-ps",
    "horovod-mpi",
    "jupyter-notebook",
    "tensorboard-training",
    "hyperparameter-sweep",
}
ALL = starters()


def test_there_are_a_dozen_starters_covering_the_required_patterns() -> None:
    slugs = {s.slug for s in ALL}
    assert len(slugs) >= 12
    assert slugs >= REQUIRED


@pytest.mark.parametrize("starter", ALL, ids=[s.slug for s in ALL])
def test_each_starter_passes_the_submission_validator(starter: Starter) -> None:
    job = parse_job(starter.job_yaml)
    assert job.name == starter.slug, "the job is named after its folder"
    assert job.protocol_version in (2, "2")


@pytest.mark.parametrize("starter", ALL, ids=[s.slug for s in ALL])
def test_each_starter_has_an_item_and_a_readme(starter: Starter) -> None:
    item = starter.item
    assert set(item) == {"name", "summary", "tags", "categories"}
    assert isinstance(item["name"], str)
    assert item["name"].strip()
    assert isinstance(item["summary"], str)
    assert 10 < len(item["summary"]) <= 200
    assert item["tags"]
    assert all(isinstance(t, str) and t == t.lower() for t in item["tags"])
    assert item["categories"]
    assert all(isinstance(c, str) for c in item["categories"])
    assert starter.readme.startswith("# ")


def test_starter_names_are_unique() -> None:
    names = [s.item["name"] for s in ALL]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("starter", ALL, ids=[s.slug for s in ALL])
def test_each_starter_asks_for_no_gpu_so_it_runs_on_a_plain_pai_up(starter: Starter) -> None:
    job = parse_job(starter.job_yaml)
    assert all(role.resource_per_instance.gpu == 0 for role in job.task_roles.values())


@pytest.mark.parametrize("starter", ALL, ids=[s.slug for s in ALL])
def test_each_starter_readme_documents_its_parameters(starter: Starter) -> None:
    job = parse_job(starter.job_yaml)
    for name in job.parameters or {}:
        assert f"`{name}`" in starter.readme, f"{starter.slug}: README does not describe {name}"
