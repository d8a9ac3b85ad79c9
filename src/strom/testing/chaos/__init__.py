"""Fault injection against real strom clusters and a Jepsen-style checker (see README.md)."""
