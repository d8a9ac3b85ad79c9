"""Partition leadership state, the replica manager, delayed operations and durable flushing."""
