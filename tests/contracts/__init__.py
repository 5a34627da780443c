"""Contract tests of the shared models."""
