"""Every reference job gets the verdict OpenPAI's own REST server gave it, for the same reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from libs.protocol import JobProtocolError, masked_config, parse_job, render_entrypoint
from tests.protocol.anchors import JOBS, NEEDED, job_files, openpai_verdicts
from tests.support.anchors import skip_module_without

skip_module_without(*NEEDED)
VERDICTS = openpai_verdicts()
FILES = job_files()


def test_the_reference_table_lists_every_job_file_and_some_rejections() -> None:
    listed = set(VERDICTS)
    on_disk = {p.relative_to(JOBS).as_posix() for p in FILES}
    assert on_disk == listed
    assert any(not v.accepted for v in VERDICTS.values())
    assert any(v.accepted for v in VERDICTS.values())


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(JOBS).as_posix())
def test_job_gets_the_verdict_openpai_gave(path: Path) -> None:
    verdict = VERDICTS[path.relative_to(JOBS).as_posix()]
    text = path.read_text(encoding="utf-8")
    if verdict.accepted:
        job = parse_job(text)
        for role in job.task_roles:
            assert render_entrypoint(job, role)
        assert masked_config(job)["name"] == job.name
        return
    with pytest.raises(JobProtocolError) as caught:
        parse_job(text)
    problems = caught.value.problems
    assert problems
    missing = re.search(r"Prerequisite (\S+) does not exist", verdict.reason)
    wrong_field = re.search(r'"dataPath":"\.([^"]+)"', verdict.reason)
    if missing:
        assert any(f"'{missing.group(1)}' does not exist" in p.message for p in problems), problems
    elif wrong_field:
        assert wrong_field.group(1) in [p.path for p in problems], problems
    elif "single document" in verdict.reason:
        assert any("single document" in p.message for p in problems), problems
