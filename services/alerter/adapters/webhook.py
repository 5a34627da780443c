"""Posting Alertmanager-compatible webhook JSON to a receiver's URL (aiohttp client)."""

from __future__ import annotations

import aiohttp
import structlog

from libs.alerting.config import WebhookConfig
from services.alerter.core.dispatching import Notification
from services.alerter.core.payloads import webhook_payload

log = structlog.get_logger(__name__)


class WebhookSender:
    def __init__(self, session: aiohttp.ClientSession, *, external_url: str = "") -> None:
        self.session = session
        self.external_url = external_url

    async def send(self, config: WebhookConfig, notification: Notification) -> bool:
        payload = webhook_payload(
            notification,
            send_resolved=config.send_resolved,
            max_alerts=config.max_alerts,
            external_url=self.external_url,
        )
        if payload is None:
            return False
        async with self.session.post(
            config.url, json=payload, timeout=aiohttp.ClientTimeout(total=10)
        ) as reply:
            reply.raise_for_status()
        log.info(
            "alert webhook sent", receiver=notification.receiver, url=config.url, status=payload["status"]
        )
        return True
