"""A starter folder (item.yaml, job.yaml, README.md) as the item the marketplace holds, or the
file and field to fix."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.marketplace.core.items import FieldError
from services.marketplace.core.starters import starter_item
from tests.protocol.jobtexts import BASE_JOB, to_yaml

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
JOB = to_yaml(BASE_JOB)
ITEM = "name: MNIST training\nsummary: Train on MNIST\ntags: [pytorch, mnist]\ncategories: [training]\n"
README = "# MNIST\n\nTrains a small network.\n"


def refusal(item_yaml: str = ITEM, job_yaml: str = JOB, readme: str = README) -> FieldError:
    with pytest.raises(FieldError) as caught:
        starter_item("s1", item_yaml, job_yaml, readme, NOW)
    return caught.value


def test_a_starter_is_a_public_approved_template_by_pai() -> None:
    item = starter_item("s1", ITEM, JOB, README, NOW)
    assert item.id == "s1"
    assert item.author == "pai"
    assert item.type == "template"
    assert item.name == "MNIST training"
    assert item.summary == "Train on MNIST"
    assert item.tags == ("pytorch", "mnist")
    assert item.categories == ("training",)
    assert item.protocol == JOB
    assert item.description == README
    assert (item.is_public, item.is_private, item.visibility) == (True, False, "public")
    assert item.status == "approved"
    assert item.group_list == ()
    assert item.created_at == item.updated_at == NOW


def test_an_item_yaml_with_the_name_only_is_enough() -> None:
    item = starter_item("s2", "name: Hello\n", JOB, "", NOW)
    assert (item.name, item.summary, item.tags, item.categories, item.description) == (
        "Hello",
        "",
        (),
        (),
        "",
    )


def test_an_item_yaml_that_is_not_yaml_names_the_file() -> None:
    error = refusal(item_yaml="name: [unclosed\n")
    assert error.field == "item.yaml"
    assert error.message.startswith("item.yaml is not YAML: ")
    assert "flow sequence" in error.message


@pytest.mark.parametrize("text", ["", "- name\n- summary\n", "just text\n", "42\n"])
def test_an_item_yaml_that_is_not_a_mapping_says_what_it_holds(text: str) -> None:
    error = refusal(item_yaml=text)
    assert error.field == "item.yaml"
    assert error.message == "item.yaml must be a mapping with name, summary, tags, categories."


def test_a_key_item_yaml_may_not_hold_is_named_first_in_order() -> None:
    error = refusal(item_yaml="name: x\ntype: data\nauthor: eve\n")
    assert error.field == "item.yaml:author"
    assert error.message == "item.yaml may hold only categories, name, summary, tags."


def test_an_item_yaml_without_a_name_names_the_field() -> None:
    error = refusal(item_yaml="summary: no name\n")
    assert error.field == "item.yaml:name"
    assert error.message == "name is required; give the item a short title."


def test_a_wrong_field_in_item_yaml_names_the_file_and_the_field() -> None:
    error = refusal(item_yaml="name: x\ntags: pytorch\n")
    assert error.field == "item.yaml:tags"
    assert error.message == "tags must be a list of strings."
    assert error.problems == []


def test_a_job_yaml_that_is_not_a_valid_job_names_job_yaml_with_each_problem() -> None:
    error = refusal(job_yaml=JOB.replace("instances: 2", "instances: 0"))
    assert error.field == "job.yaml:protocol"
    assert error.message.startswith("protocol is not a valid job: taskRoles.worker.instances")
    assert [p["path"] for p in error.problems] == ["taskRoles.worker.instances"]


def test_an_empty_job_yaml_names_job_yaml() -> None:
    error = refusal(job_yaml="  \n")
    assert error.field == "job.yaml:protocol"
    assert error.message == "protocol is required for a template: the job protocol v2 YAML."


def test_a_readme_over_the_limit_names_readme() -> None:
    error = refusal(readme="x" * (64 * 1024 + 1))
    assert error.field == "README.md:description"
    assert error.message == "description has 65,537 characters, over the limit of 65,536; shorten it."
