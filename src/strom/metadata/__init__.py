"""Cluster metadata as an immutable image, and the stores that persist it."""
