"""Attack: bodies no parser should be handed — not UTF-8, too large, nested without end.

Before, login with 100,000 nested `[` answered 500 (RecursionError), random bytes as a job
answered 500 (UnicodeDecodeError), a 5 MB job got aiohttp's plain-text 413, and 100,000 nested
`[` as job YAML crashed the whole REST process inside libyaml's composer. Each is now a 400 or
a 413 in OpenPAI's JSON error shape naming the limit or the byte offset, and the service
answers the next request.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from tests.rest.serving import ServerThread
from tests.security.rest_app import error_of, one_role_job, rest_service

Service = tuple[ServerThread, dict[str, str]]
NESTED = 100_000
YAML = {"Content-Type": "text/yaml"}


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Service]:
    with rest_service(tmp_path_factory.mktemp("bodies")) as running:
        yield running


@pytest.fixture
async def api(service: Service) -> AsyncIterator[httpx.AsyncClient]:
    server, admin = service
    async with httpx.AsyncClient(base_url=server.url, headers=admin, timeout=30) as client:
        yield client


async def still_serving(api: httpx.AsyncClient, name: str) -> None:
    response = await api.post("/api/v2/jobs", content=one_role_job(name), headers=YAML)
    assert response.status_code == 202, response.text


@pytest.mark.parametrize(
    "body",
    [pytest.param("[" * NESTED, id="nested lists"), pytest.param('{"a":' * NESTED, id="nested objects")],
)
async def test_deeply_nested_json_to_login_is_a_400_naming_the_depth_limit(
    api: httpx.AsyncClient, body: str
) -> None:
    response = await api.post(
        "/api/v2/authn/basic/login", content=body, headers={"Content-Type": "application/json"}
    )
    status, error = error_of(response)
    assert status == 400
    assert "nested more than 100 levels deep" in error["message"]


async def test_deeply_nested_json_to_every_json_route_is_a_400(api: httpx.AsyncClient) -> None:
    await still_serving(api, "target")
    body = "[" * NESTED
    for method, path in (
        ("POST", "/api/v2/users"),
        ("PUT", "/api/v2/users/me"),
        ("PUT", "/api/v2/jobs/admin~target/executionType"),
        ("PUT", "/api/v2/jobs/admin~target/tag"),
        ("POST", "/api/v2/groups"),
    ):
        status, error = error_of(await api.request(method, path, content=body))
        assert (status, error["code"]) == (400, "InvalidParametersError"), (path, error)
        assert "100 levels" in error["message"]


@pytest.mark.parametrize(
    "body",
    [
        pytest.param("[" * NESTED, id="flow lists"),
        pytest.param("a: " + "{b: " * NESTED, id="flow mappings"),
        pytest.param("".join(" " * i + "k:\n" for i in range(300)), id="block mappings"),
    ],
)
async def test_deeply_nested_yaml_jobs_are_a_400_and_the_service_lives_on(
    api: httpx.AsyncClient, body: str, request: pytest.FixtureRequest
) -> None:
    status, error = error_of(await api.post("/api/v2/jobs", content=body, headers=YAML))
    assert status == 400
    assert "more than 100 levels" in error["message"]
    await still_serving(api, f"after-{request.node.callspec.id.replace(' ', '-')}")


def laughs(first_key: str) -> str:
    lines = [f"{first_key}: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        lines.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    return "\n".join(lines)


async def test_a_billion_laughs_job_is_a_400(api: httpx.AsyncClient) -> None:
    status, error = error_of(await api.post("/api/v2/jobs", content=laughs("a"), headers=YAML))
    assert status == 400
    assert "200000 values after expanding aliases" in error["message"]


async def test_a_billion_laughs_or_deep_cluster_config_is_a_400(api: httpx.AsyncClient) -> None:
    put = await api.put("/api/v2/virtual-clusters/config", content=laughs("virtualClusters"))
    status, error = error_of(put)
    assert status == 400
    assert "after expanding aliases (the limit)" in error["message"]
    deep = await api.put("/api/v2/virtual-clusters/config", content="[" * NESTED)
    assert error_of(deep)[0] == 400


async def test_deep_failure_rules_are_a_400(api: httpx.AsyncClient) -> None:
    status, error = error_of(await api.put("/api/v2/failure-rules", content="[" * NESTED))
    assert status == 400
    assert "100 levels deep" in error["message"]


async def test_a_job_that_is_not_utf8_is_a_400_naming_the_byte_offset(api: httpx.AsyncClient) -> None:
    status, error = error_of(await api.post("/api/v2/jobs", content=b"\xff\xfe\x00bad", headers=YAML))
    assert (status, error["code"]) == (400, "InvalidParametersError")
    assert "byte 0 (0xff)" in error["message"]
    assert error["offset"] == 0
    latin1 = one_role_job("café").encode("latin-1")
    status, error = error_of(await api.post("/api/v2/jobs", content=latin1, headers=YAML))
    assert status == 400
    assert error["offset"] == latin1.index(b"\xe9")


async def test_a_declared_charset_is_honoured(api: httpx.AsyncClient) -> None:
    text = one_role_job("latin").replace("echo hello", "echo café")
    headers = {"Content-Type": "text/yaml; charset=latin-1"}
    response = await api.post("/api/v2/jobs", content=text.encode("latin-1"), headers=headers)
    assert response.status_code == 202, response.text


async def test_random_bytes_to_login_are_a_400_not_a_500(api: httpx.AsyncClient) -> None:
    for content_type in ("application/json", "application/x-www-form-urlencoded", "text/plain"):
        response = await api.post(
            "/api/v2/authn/basic/login",
            content=bytes(range(128, 256)),
            headers={"Content-Type": content_type},
        )
        assert error_of(response)[0] == 400


async def test_a_5_mb_job_is_a_413_in_json_naming_the_limit(api: httpx.AsyncClient, service: Service) -> None:
    limit = service[0].settings.limit_body_bytes
    big = one_role_job("big") + "description: " + "x" * (5 * 1024 * 1024) + "\n"
    status, error = error_of(await api.post("/api/v2/jobs", content=big, headers=YAML))
    assert (status, error["code"]) == (413, "RequestEntityTooLargeError")
    assert f"{limit:,} bytes" in error["message"]
    assert error["limit"] == limit
    await still_serving(api, "after-5mb")


async def test_an_oversize_body_sent_in_chunks_is_a_413_too(api: httpx.AsyncClient, service: Service) -> None:
    limit = service[0].settings.limit_body_bytes

    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(3):
            yield b"#" * limit

    status, error = error_of(await api.post("/api/v2/jobs", content=chunks(), headers=YAML))
    assert (status, error["code"]) == (413, "RequestEntityTooLargeError")
