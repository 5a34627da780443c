"""Tests of the shared plumbing against a real nats-server."""
