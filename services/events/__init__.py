"""The events gateway: the bus over HTTP for tools (server-sent events and webhooks)."""
