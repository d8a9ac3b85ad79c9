"""The classic consumer-group coordinator and its ``__consumer_offsets`` records."""
