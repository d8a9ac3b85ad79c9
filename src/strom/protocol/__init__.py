"""Sans-io Kafka wire protocol: frames, API codecs, record batches. No sockets, no asyncio."""
