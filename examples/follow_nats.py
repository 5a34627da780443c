"""Follow job events straight from NATS JetStream, checked against the published event catalog.

    pip install nats-py jsonschema
    python examples/follow_nats.py --nats nats://127.0.0.1:4222 --until-done 1

Against `pai up`'s bus (private, over TLS): its NATS address as `pai up` prints it, and
    --user admin --password "$(jq -r .admin DATA/nats-credentials.json)" --ca DATA/tls/nats-ca.pem

Subjects carry ids only: pai.job.<job id>.<event type> on the stream PAI_JOBS (see
libs/protocol/subjects.py). Each message's body is one event of the catalog
(libs/protocol/catalog/events.schema.json): this tool validates it and prints one line per
event. An ordered consumer reads the stream from its start (or from --start-sequence), so a
reconnect continues where it was. With --until-done N it exits after N jobs completed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import sys
from pathlib import Path

import jsonschema
import nats
from nats.js.api import ConsumerConfig, DeliverPolicy

CATALOG = Path(__file__).resolve().parents[1] / "libs" / "protocol" / "catalog" / "events.schema.json"


async def follow(args: argparse.Namespace, catalog: dict[str, object]) -> int:
    validator = jsonschema.Draft202012Validator(catalog)
    # With the platform's authority the server is verified before anything else is said, so the
    # password goes to the real bus only (libs/backbone/bustls.py).
    tls = {"tls": ssl.create_default_context(cafile=args.ca), "tls_handshake_first": True} if args.ca else {}
    nc = await nats.connect(args.nats, user=args.user, password=args.password, **tls)
    try:
        js = nc.jetstream()
        sub = await js.subscribe(
            args.subjects,
            ordered_consumer=True,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=args.start_sequence
            ),
        )
        completed = 0
        async for msg in sub.messages:
            event = json.loads(msg.data)
            validator.validate(event)  # exactly the catalog's shape, or this raises
            sequence = msg.metadata.sequence.stream
            print(f"{sequence} {event['type']} job={event.get('job_id', '-')}", flush=True)
            if event["type"] == "job.completed":
                completed += 1
                if args.until_done and completed >= args.until_done:
                    return 0
    finally:
        await nc.close()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nats", default="nats://127.0.0.1:4222")
    parser.add_argument("--user", help="the bus user (pai up: admin)")
    parser.add_argument("--password", help="its password (pai up: in DATA/nats-credentials.json)")
    parser.add_argument("--ca", help="the authority of the bus's certificate (pai up: DATA/tls/nats-ca.pem)")
    parser.add_argument("--subjects", default="pai.job.>", help="e.g. pai.job.*.job.completed")
    parser.add_argument("--start-sequence", type=int, default=1)
    parser.add_argument("--catalog", default=str(CATALOG))
    parser.add_argument("--until-done", type=int, default=0, help="exit after this many jobs completed")
    args = parser.parse_args()
    return asyncio.run(follow(args, json.loads(Path(args.catalog).read_text())))


if __name__ == "__main__":
    sys.exit(main())
