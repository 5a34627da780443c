"""Typed keys of the gateway's aiohttp application state."""

from __future__ import annotations

from aiohttp import web

from services.events.adapters.delivering import Deliveries
from services.events.adapters.following import Hub
from services.events.adapters.identity import Identities
from services.events.settings import EventsSettings

SETTINGS = web.AppKey("settings", EventsSettings)
HUB = web.AppKey("hub", Hub)
IDENTITIES = web.AppKey("identities", Identities)
DELIVERIES = web.AppKey("deliveries", Deliveries)
