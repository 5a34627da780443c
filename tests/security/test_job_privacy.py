"""Attack: reading other people's jobs — their detail, attempts, events, config and logs.

Anonymous requests read any job's detail, events and attempts (IPs, ports, node names) and any
signed-in user read any job's config and logs. On a new cluster these are now private: an
anonymous caller gets 401, another user 403, the owner and admins read them. The admin may
choose OpenPAI's public behaviour (`PAI_JOB_DETAIL_PUBLIC=true`). The job list stays
visible to every signed-in user, as in OpenPAI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.security.rest_app import error_of, one_role_job, rest_service

JOB = "/api/v2/jobs/alice~diary"
READS = [
    JOB,
    JOB + "/attempts/0",
    JOB + "/config",
    JOB + "/job-attempts",
    JOB + "/job-attempts/0",
    JOB + "/events",
    JOB + "/attempts/0/taskRoles/worker/taskIndex/0/attempts",
    JOB + "/attempts/0/taskRoles/worker/taskIndex/0/attempts/0/logs",
    JOB + "/attempts/0/taskRoles/worker/taskIndex/0/attempts/0/logs/all",
]
# Of these, OpenPAI's public behaviour still asks a signed-in caller for the config and logs.
SIGNED_IN_EVEN_IF_PUBLIC = {READS[2], READS[7], READS[8]}


def callers(tmp_path: Path, public: bool) -> Iterator[dict[str, httpx.Client]]:
    with rest_service(tmp_path, job_detail_public=public) as (server, admin_headers):
        clients: dict[str, httpx.Client] = {
            "anonymous": httpx.Client(base_url=server.url, timeout=30),
            "admin": httpx.Client(base_url=server.url, headers=admin_headers, timeout=30),
        }
        try:
            for name in ("alice", "mallory"):
                created = clients["admin"].post(
                    "/api/v2/users", json={"username": name, "password": f"{name}-password-1"}
                )
                assert created.status_code == 201, created.text
                login = clients["anonymous"].post(
                    "/api/v2/authn/basic/login", json={"username": name, "password": f"{name}-password-1"}
                )
                token = login.json()["token"]
                clients[name] = httpx.Client(
                    base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=30
                )
            submitted = clients["alice"].post(
                "/api/v2/jobs", content=one_role_job("diary"), headers={"Content-Type": "text/yaml"}
            )
            assert submitted.status_code == 202, submitted.text
            yield clients
        finally:
            for client in clients.values():
                client.close()


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, httpx.Client]]:
    yield from callers(tmp_path_factory.mktemp("private"), public=False)


@pytest.fixture(scope="module")
def public(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, httpx.Client]]:
    yield from callers(tmp_path_factory.mktemp("public"), public=True)


def past_authorisation(response: httpx.Response) -> bool:
    """Got past the access check: any answer but 401 and 403 (a log not yet there is a 404)."""
    return response.status_code not in (401, 403)


def test_by_default_only_the_owner_and_admins_read_a_job(private: dict[str, httpx.Client]) -> None:
    for path in READS:
        status, body = error_of(private["anonymous"].get(path))
        assert (status, body["code"]) == (401, "UnauthorizedUserError"), path
        status, body = error_of(private["mallory"].get(path))
        assert (status, body["code"]) == (403, "ForbiddenUserError"), path
        assert body["message"] == "User mallory is not allowed to read job alice~diary."
        assert "only a job's owner and admins" in body["hint"]
        assert past_authorisation(private["alice"].get(path)), path
        assert past_authorisation(private["admin"].get(path)), path
    assert private["alice"].get(JOB).json()["name"] == "diary"


def test_anonymous_callers_learn_nothing_about_which_jobs_exist(private: dict[str, httpx.Client]) -> None:
    assert error_of(private["anonymous"].get("/api/v2/jobs/alice~no-such-job"))[0] == 401
    assert error_of(private["mallory"].get("/api/v2/jobs/alice~no-such-job"))[0] == 404


def test_the_job_list_is_for_signed_in_users(private: dict[str, httpx.Client]) -> None:
    assert error_of(private["anonymous"].get("/api/v2/jobs"))[0] == 401
    names = [job["name"] for job in private["mallory"].get("/api/v2/jobs").json()]
    assert names == ["diary"]


def test_a_public_cluster_answers_as_openpai_does(public: dict[str, httpx.Client]) -> None:
    for path in READS:
        anonymous = public["anonymous"].get(path)
        if path in SIGNED_IN_EVEN_IF_PUBLIC:
            assert anonymous.status_code == 401, path
        else:
            assert past_authorisation(anonymous), path
        assert past_authorisation(public["mallory"].get(path)), path
