"""Nothing a user can send makes the parser fail with anything but JobProtocolError."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from libs.protocol import JobConfig, JobProtocolError, masked_config, parse_job, render_entrypoint
from tests.protocol.anchors import JOBS, NEEDED, job_files, openpai_verdicts
from tests.support.anchors import needs, present


def _accepted_jobs() -> list[dict[str, Any]]:
    if not present(*NEEDED):
        return []
    verdicts = openpai_verdicts()
    jobs = []
    for path in job_files():
        if verdicts[path.relative_to(JOBS).as_posix()].accepted:
            jobs.append(yaml.safe_load(path.read_text(encoding="utf-8")))
    return jobs


ACCEPTED = _accepted_jobs()

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=20),
    st.sampled_from(["<% $parameters.x %>", "<% x", "<%#a%>", "dockerimage", "job", "worker", "-1", "2"]),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=20,
)


def check(text: str) -> None:
    try:
        job = parse_job(text)
    except JobProtocolError as exc:
        problems = exc.problems
    else:
        problems = []
        assert isinstance(job, JobConfig)
        for role in job.task_roles:
            render_entrypoint(job, role)
        masked_config(job)
        return
    assert problems


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=300))
def test_arbitrary_text_is_parsed_or_refused(text: str) -> None:
    check(text)


@settings(max_examples=200, deadline=None)
@given(values)
def test_arbitrary_yaml_data_is_parsed_or_refused(data: object) -> None:
    check(yaml.safe_dump(data))


def _paths(node: object, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            found.extend(_paths(value, (*prefix, index)))
    return found


@st.composite
def mutated_jobs(draw: st.DrawFn) -> object:
    data: Any = copy.deepcopy(draw(st.sampled_from(ACCEPTED)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        paths = [p for p in _paths(data) if p]
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = data
        for step in path[:-1]:
            parent = parent[step]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(values)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(st.text(max_size=12))] = draw(values)
        else:
            parent.append(draw(values))
    return data


@needs(*NEEDED)
@settings(max_examples=300, deadline=None)
@given(mutated_jobs())
def test_mutated_reference_jobs_are_parsed_or_refused(data: object) -> None:
    check(yaml.safe_dump(data))


@needs(*NEEDED)
def test_the_mutation_base_holds_the_accepted_reference_jobs() -> None:
    assert len(ACCEPTED) == sum(v.accepted for v in openpai_verdicts().values())
    for data in ACCEPTED:
        parse_job(yaml.safe_dump(data))


def test_alias_bombs_and_cycles_are_refused_quickly() -> None:
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)
    )
    for text in (bomb, "a: &x [*x]\n", "[" * 5000 + "]" * 5000):
        with pytest.raises(JobProtocolError) as caught:
            parse_job(text)
        assert caught.value.problems
