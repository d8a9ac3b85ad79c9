"""Coordinators (consumer groups today; transactions later) as replayed state machines."""
