"""The marketplace's bus user: its own events and the job stream's submissions, nothing more."""

from __future__ import annotations

from pathlib import Path

import nats.errors
import pytest

from libs.backbone.busauth import CREDENTIALS_FILE, authorization_config, load_credentials
from libs.backbone.connecting import connect
from libs.backbone.errors import TemporaryError
from libs.backbone.natsserver import EmbeddedNats
from libs.backbone.provisioning import ConsumerSpec, ensure_consumer
from libs.backbone.topology import SECRETS, ensure_topology, publish_event
from libs.protocol.events import JobSubmitted, MarketplaceItemCreated
from libs.protocol.subjects import JOBS_STREAM
from services.marketplace.adapters.counting import DURABLE, SUBMITTED
from tests.support.jobs import job_model


async def test_the_marketplace_publishes_its_events_reads_submissions_and_nothing_else(
    tmp_path: Path,
) -> None:
    credentials = load_credentials(tmp_path / CREDENTIALS_FILE, ("rest", "marketplace"))
    server = EmbeddedNats(tmp_path / "nats", authorization=authorization_config(credentials))
    server.start_sync()
    try:
        rest = await connect(server.url, user="rest", password=credentials["rest"], initial_timeout=5)
        market = await connect(
            server.url,
            user="marketplace",
            password=credentials["marketplace"],
            initial_timeout=5,
            js_timeout=1,
        )
        try:
            await ensure_topology(market.js)
            submitted = JobSubmitted(
                job_id="j1", user="u", name="n", virtual_cluster="default", config=job_model({})
            )
            await publish_event(rest.js, submitted)
            created = MarketplaceItemCreated(
                item_id="i1",
                name="n",
                author="u",
                item_type="template",
                visibility="private",
                status="approved",
            )
            ack = await publish_event(market.js, created)
            assert ack.stream == "PAI_MARKETPLACE"

            await ensure_consumer(market.js, ConsumerSpec(JOBS_STREAM, DURABLE, filter_subjects=(SUBMITTED,)))
            sub = await market.js.pull_subscribe_bind(durable=DURABLE, stream=JOBS_STREAM)
            [msg] = await sub.fetch(1, timeout=5)
            await msg.ack()
            assert msg.subject == submitted.subject()

            # It cannot announce a job's facts, nor reach the secrets.
            with pytest.raises(TemporaryError, match="not confirmed"):  # the server drops it
                await publish_event(
                    market.js, submitted.model_copy(update={"event_id": "forged"}), ack_timeout=0.5
                )
            with pytest.raises((nats.errors.Error, TimeoutError)):
                await market.js.key_value(SECRETS.bucket)
        finally:
            await market.close()
            await rest.close()
    finally:
        server.kill_sync()
