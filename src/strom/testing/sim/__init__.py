"""A deterministic in-process cluster simulation checked by the chaos checker (README.md)."""
