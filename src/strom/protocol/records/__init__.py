"""Record batches (magic v2): header validation, CRC-32C, building, compression, decoding."""
