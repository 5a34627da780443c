"""Revisions of the marketplace's tables."""
