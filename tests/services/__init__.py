"""Service tests on a real nats-server."""
