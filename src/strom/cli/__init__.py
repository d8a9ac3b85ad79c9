"""The ``strom`` command: one module per sub-command."""
