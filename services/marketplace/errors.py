"""Errors the marketplace answers with: ``{code, message, field}``, as the REST API shapes them."""

from __future__ import annotations

from libs.web.errors import ApiError, conflict, forbidden, invalid, not_found, unauthorized, unavailable

__all__ = ["ApiError", "conflict", "forbidden", "invalid", "not_found", "unauthorized", "unavailable"]
