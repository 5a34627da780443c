"""Who has gone quiet: nodes whose reports stopped and services whose heartbeats stopped.

A pure tracker fed with "seen at" times and asked at a given `now`, so thresholds are tested on
a fake clock. A node is declared lost once per silence (the orchestrator fails its tasks as
platform failures); it becomes known again with its next report.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Liveness:
    node_lost_after: float
    service_down_after: float
    nodes: dict[str, tuple[str, float]] = field(default_factory=dict)  # node id -> (name, last seen)
    lost: set[str] = field(default_factory=set)
    services: dict[str, float] = field(default_factory=dict)

    def node_seen(self, node_id: str, name: str, at: float) -> None:
        previous = self.nodes.get(node_id)
        if previous is None or at >= previous[1]:
            self.nodes[node_id] = (name, at)
            self.lost.discard(node_id)

    def newly_lost(self, now: float) -> list[tuple[str, str, float]]:
        """(node id, name, silent seconds) for each node silent too long and not yet declared lost."""
        found = []
        for node_id, (name, seen) in sorted(self.nodes.items()):
            if node_id not in self.lost and now - seen > self.node_lost_after:
                self.lost.add(node_id)
                found.append((node_id, name, now - seen))
        return found

    def service_seen(self, service: str, at: float) -> None:
        self.services[service] = max(at, self.services.get(service, at))

    def services_up(self, now: float) -> dict[str, bool]:
        return {name: now - seen <= self.service_down_after for name, seen in sorted(self.services.items())}

    def nodes_ready(self) -> dict[str, bool]:
        return {name: node_id not in self.lost for node_id, (name, _) in sorted(self.nodes.items())}
