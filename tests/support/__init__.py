"""Helpers shared by test suites: waiting on conditions, running consumers, in-memory spans."""
