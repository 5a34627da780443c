"""Errors the gateway answers with, in OpenPAI's ``{code, message}`` shape, like the REST API."""

from __future__ import annotations

from libs.web.errors import ApiError, forbidden, not_found, unauthorized, unavailable
from libs.web.errors import invalid as invalid_parameters

__all__ = ["ApiError", "forbidden", "invalid_parameters", "not_found", "unauthorized", "unavailable"]
