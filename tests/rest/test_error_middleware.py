"""The error boundary: text the database cannot hold is the caller's 400; other database errors
stay a 500 that shows nothing of the statement."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from sqlalchemy.exc import DBAPIError

from services.rest.routes.middlewares import error_middleware


class DriverError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"driver error {sqlstate}")
        self.sqlstate = sqlstate


@pytest.mark.parametrize(
    ("sqlstate", "status", "code"),
    [
        ("22021", 400, "InvalidParametersError"),  # character_not_in_repertoire (a NUL)
        ("22P05", 400, "InvalidParametersError"),  # untranslatable_character
        ("40001", 500, "UnknownError"),  # serialization_failure: ours, not the caller's
    ],
)
async def test_database_errors_are_answered_by_their_cause(sqlstate: str, status: int, code: str) -> None:
    async def failing(request: web.Request) -> web.Response:
        raise DBAPIError("SELECT secret_statement", {}, DriverError(sqlstate))

    app = web.Application(middlewares=[error_middleware])
    app.router.add_get("/x", failing)
    client: TestClient[Any, Any] = TestClient(TestServer(app))
    await client.start_server()
    try:
        response = await client.get("/x")
        body = await response.json()
    finally:
        await client.close()
    assert (response.status, body["code"]) == (status, code)
    assert "secret_statement" not in body["message"]
