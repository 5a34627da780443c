"""Adapters: the outside world the orchestrator talks to (processes, KV, the bus)."""
