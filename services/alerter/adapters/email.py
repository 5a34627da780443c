"""Sending alert emails over SMTP (aiosmtplib), one message per notification and receiver."""

from __future__ import annotations

import string
from email.message import EmailMessage

import aiosmtplib
import structlog

from libs.alerting.config import EmailConfig
from services.alerter.core.dispatching import Notification
from services.alerter.core.payloads import common, email_message

log = structlog.get_logger(__name__)


def recipients(config: EmailConfig, notification: Notification) -> list[str]:
    """The `to` template over the alerts' common labels, e.g. "$user@example.org"."""
    labels = common([a.labels for a in notification.firing + notification.resolved])
    rendered = string.Template(config.to).safe_substitute(labels)
    return [address.strip() for address in rendered.split(",") if address.strip() and "$" not in address]


class EmailSender:
    def __init__(self, *, timeout: float = 10.0) -> None:
        self.timeout = timeout

    async def send(self, config: EmailConfig, notification: Notification) -> bool:
        """Send if there is something to say; False when skipped, raises OSError-like on failure."""
        rendered = email_message(
            notification, subject=config.subject, text=config.text, send_resolved=config.send_resolved
        )
        to = recipients(config, notification)
        if rendered is None or not to:
            return False
        subject, body = rendered
        message = EmailMessage()
        message["From"] = config.sender
        message["To"] = ", ".join(to)
        message["Subject"] = subject
        message.set_content(body)
        host, _, port = config.smarthost.rpartition(":")
        await aiosmtplib.send(
            message, hostname=host or config.smarthost, port=int(port or 25), timeout=self.timeout
        )
        log.info("alert email sent", receiver=notification.receiver, to=to, subject=subject)
        return True
