"""Typed keys of the marketplace's aiohttp application state."""

from __future__ import annotations

from aiohttp import web

from services.marketplace.adapters.announcing import Announcer
from services.marketplace.adapters.asking import Rest
from services.marketplace.adapters.storing import Store
from services.marketplace.settings import MarketplaceSettings

SETTINGS = web.AppKey("settings", MarketplaceSettings)
STORE = web.AppKey("store", Store)
REST = web.AppKey("rest", Rest)
ANNOUNCER = web.AppKey("announcer", Announcer)
