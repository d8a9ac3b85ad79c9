"""``strom producers describe --topic T --partition P [--broker-id B]``: a partition's active
producers (DescribeProducers), as ``strom transactions describe-producers`` prints them (see
:mod:`strom.cli.transactions`)."""

from __future__ import annotations

import argparse

from strom.cli.transactions import register_producers


def register(sub: argparse._SubParsersAction) -> None:
    register_producers(sub)
