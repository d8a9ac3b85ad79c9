"""Options of the ``strom`` data source, parsed and checked the way Spark's Kafka source does.

Pure Python (no PySpark import): the driver parses the options map once into a
:class:`SourceOptions` / :class:`SinkOptions`; the parsed objects are picklable.
Offsets in JSON use Spark's form ``{"topic": {"0": 23, "1": -2}}`` with -2 for earliest and
-1 for latest.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.common.errors import StromError

EARLIEST = -2
LATEST = -1

SUBSCRIBE_OPTIONS = ("assign", "subscribe", "subscribePattern")


class StromSourceOptionError(StromError, ValueError):
    """An option of the ``strom`` data source is missing, contradictory or malformed."""


@dataclass(frozen=True, slots=True)
class OffsetBound:
    """``earliest`` / ``latest`` for every partition, or per-partition offsets from JSON.

    ``default`` applies to partitions not named in ``specific`` (Spark requires every
    partition to be named for starting/ending JSON; strom falls back to ``default``).
    """

    default: int
    specific: Mapping[tuple[str, int], int] = field(default_factory=dict)

    def for_partition(self, topic: str, partition: int) -> int:
        return self.specific.get((topic, partition), self.default)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The reader's parsed options."""

    bootstrap: str
    strategy: str  # one of SUBSCRIBE_OPTIONS
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[tuple[str, int], ...] = ()
    starting: OffsetBound = OffsetBound(EARLIEST)
    ending: OffsetBound = OffsetBound(LATEST)
    include_headers: bool = False
    min_partitions: int | None = None
    client_options: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The writer's parsed options."""

    bootstrap: str
    topic: str | None = None
    client_options: Mapping[str, str] = field(default_factory=dict)


def _lower(options: Mapping[str, str]) -> dict[str, str]:
    # Spark's options map is case-insensitive; PySpark hands over the keys as given.
    return {k.lower(): v for k, v in options.items()}


def _bootstrap(opts: Mapping[str, str]) -> str:
    bootstrap = opts.get("kafka.bootstrap.servers", "").strip()
    if not bootstrap:
        raise StromSourceOptionError("option 'kafka.bootstrap.servers' must be specified")
    return bootstrap


def _client_options(opts: Mapping[str, str]) -> dict[str, str]:
    return {k[len("kafka."):]: v for k, v in opts.items()
            if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}


def _bool(opts: Mapping[str, str], name: str) -> bool:
    raw = opts.get(name.lower(), "false").strip().lower()
    if raw not in ("true", "false"):
        raise StromSourceOptionError(f"option {name!r} must be true or false, got {raw!r}")
    return raw == "true"


def parse_offset_bound(raw: str | None, name: str, default: int, *,
                       allow_earliest: bool = True, allow_latest: bool = True) -> OffsetBound:
    """Parse ``startingOffsets`` / ``endingOffsets``: earliest, latest or per-partition JSON."""
    if raw is None or not raw.strip():
        return OffsetBound(default)
    text = raw.strip()
    lowered = text.lower()
    if lowered in ("earliest", "latest"):
        value = EARLIEST if lowered == "earliest" else LATEST
        if (value == EARLIEST and not allow_earliest) or (value == LATEST and not allow_latest):
            raise StromSourceOptionError(f"{name} cannot be {lowered!r}")
        return OffsetBound(value)
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise StromSourceOptionError(
            f"{name} must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {raw!r}'
        ) from exc
    if not isinstance(parsed, dict):
        raise StromSourceOptionError(f"{name} JSON must be an object of topics, got {raw!r}")
    specific: dict[tuple[str, int], int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise StromSourceOptionError(
                f"{name}: partitions of topic {topic!r} must be an object, got {partitions!r}")
        for partition, offset in partitions.items():
            try:
                p = int(partition)
            except ValueError as exc:
                raise StromSourceOptionError(
                    f"{name}: partition {partition!r} of {topic!r} is not a number") from exc
            if not isinstance(offset, int) or isinstance(offset, bool) or offset < EARLIEST:
                raise StromSourceOptionError(
                    f"{name}: offset for {topic}-{p} must be an integer >= -2, got {offset!r}")
            if offset == EARLIEST and not allow_earliest:
                raise StromSourceOptionError(f"{name}: earliest (-2) is not allowed here")
            if offset == LATEST and not allow_latest:
                raise StromSourceOptionError(f"{name}: latest (-1) is not allowed here")
            specific[(topic, p)] = offset
    return OffsetBound(default, specific)


def _assignment(raw: str) -> tuple[tuple[str, int], ...]:
    try:
        parsed = json.loads(raw)
    except ValueError as exc:
        raise StromSourceOptionError(
            f'option \'assign\' must be JSON like {{"topic": [0, 1]}}, got {raw!r}') from exc
    if not isinstance(parsed, dict) or not parsed:
        raise StromSourceOptionError(
            f'option \'assign\' must be a non-empty JSON object like {{"topic": [0, 1]}}, '
            f"got {raw!r}")
    out: list[tuple[str, int]] = []
    for topic, partitions in parsed.items():
        if not isinstance(partitions, list) or not all(
                isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in partitions):
            raise StromSourceOptionError(
                f"option 'assign': partitions of {topic!r} must be a list of partition "
                f"numbers, got {partitions!r}")
        out.extend((topic, p) for p in partitions)
    return tuple(out)


def parse_source_options(options: Mapping[str, str]) -> SourceOptions:
    """Check and parse the reader's options (raises :class:`StromSourceOptionError`)."""
    opts = _lower(options)
    given = [name for name in SUBSCRIBE_OPTIONS if name.lower() in opts]
    if len(given) != 1:
        raise StromSourceOptionError(
            "exactly one of the options 'assign', 'subscribe' or 'subscribePattern' must be "
            f"specified, got {', '.join(repr(g) for g in given) if given else 'none'}")
    strategy = given[0]
    raw = opts[strategy.lower()].strip()
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[tuple[str, int], ...] = ()
    if strategy == "subscribe":
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise StromSourceOptionError("option 'subscribe' must name at least one topic")
    elif strategy == "subscribePattern":
        if not raw:
            raise StromSourceOptionError("option 'subscribePattern' must not be empty")
        try:
            re.compile(raw)
        except re.error as exc:
            raise StromSourceOptionError(
                f"option 'subscribePattern' is not a valid regex: {exc}") from exc
        pattern = raw
    else:
        assignment = _assignment(raw)
    starting = parse_offset_bound(opts.get("startingoffsets"), "startingOffsets", EARLIEST)
    ending = parse_offset_bound(opts.get("endingoffsets"), "endingOffsets", LATEST,
                                allow_earliest=False)
    min_partitions: int | None = None
    if "minpartitions" in opts:
        try:
            min_partitions = int(opts["minpartitions"])
        except ValueError as exc:
            raise StromSourceOptionError("option 'minPartitions' must be a number") from exc
        if min_partitions <= 0:
            raise StromSourceOptionError("option 'minPartitions' must be positive")
    return SourceOptions(
        bootstrap=_bootstrap(opts), strategy=strategy, topics=topics, pattern=pattern,
        assignment=assignment, starting=starting, ending=ending,
        include_headers=_bool(opts, "includeHeaders"), min_partitions=min_partitions,
        client_options=_client_options(opts),
    )


def parse_sink_options(options: Mapping[str, str]) -> SinkOptions:
    """Check and parse the writer's options (raises :class:`StromSourceOptionError`)."""
    opts = _lower(options)
    topic = opts.get("topic")
    return SinkOptions(bootstrap=_bootstrap(opts), topic=topic.strip() if topic else None,
                       client_options=_client_options(opts))
