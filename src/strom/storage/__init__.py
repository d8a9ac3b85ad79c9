"""One partition's log on disk (Kafka's layout): segments, indexes, recovery, log manager.

See README.md in this package for a map of the modules.
"""
