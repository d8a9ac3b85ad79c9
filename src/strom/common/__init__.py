"""Leaf package: typed ids, the Kafka error table, configuration declarations, clocks."""
