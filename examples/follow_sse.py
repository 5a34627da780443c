"""Follow the platform's live events over HTTP (server-sent events): a starting point for tools.

    pip install httpx httpx-sse
    python examples/follow_sse.py --server http://127.0.0.1:9186 --token "$TOKEN" \
        --job admin~hello-pai --since 0 --until-done

Prints one line per event: its id (a cursor), its type and what it says. A dropped connection
is resumed with the last id seen (the Last-Event-ID header), so no event is missed or repeated.
With --until-done it exits when the job completes, with 0 if it SUCCEEDED and 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import httpx
from httpx_sse import connect_sse


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", default=os.environ.get("PAI_SERVER", "http://127.0.0.1:9186"))
    parser.add_argument(
        "--token", default=os.environ.get("PAI_TOKEN", ""), help="a login or application token"
    )
    parser.add_argument("--job", help="USER~NAME")
    parser.add_argument("--types", help="comma-separated event types, e.g. job.completed,task.started")
    parser.add_argument("--since", help="resume after this id; 0 replays what the platform keeps")
    parser.add_argument("--until-done", action="store_true", help="exit when the job completes")
    args = parser.parse_args()

    params = {name: value for name, value in (("job", args.job), ("types", args.types)) if value}
    last_id = args.since
    with httpx.Client(
        base_url=args.server,
        headers={"Authorization": f"Bearer {args.token}"},
        timeout=httpx.Timeout(10.0, read=None),
    ) as client:
        while True:
            headers = {"Last-Event-ID": last_id} if last_id else {}
            try:
                with connect_sse(client, "GET", "/api/v2/events", params=params, headers=headers) as source:
                    if source.response.status_code != 200:
                        source.response.read()
                        print(f"error: {source.response.text}", file=sys.stderr)
                        return 2
                    for message in source.iter_sse():
                        if not message.data:
                            continue  # a keep-alive comment
                        last_id = message.id
                        event = json.loads(message.data)
                        print(f"{message.id} {message.event} job={event.get('job_id', '-')}", flush=True)
                        if args.until_done and message.event == "job.completed":
                            return 0 if event["state"] == "SUCCEEDED" else 1
            except httpx.TransportError as exc:
                print(f"connection lost ({type(exc).__name__}); resuming after {last_id}", file=sys.stderr)
                time.sleep(1.0)


if __name__ == "__main__":
    sys.exit(main())
