"""Attacks replayed against the platform, each asserted to fail."""
