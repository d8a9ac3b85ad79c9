"""Options of the ``strom`` data source, parsed and checked the way Spark's Kafka source does.

Pure Python (no PySpark import): the driver parses the options map once into a
:class:`SourceOptions` / :class:`SinkOptions`; the parsed objects are picklable.
Offsets in JSON use Spark's form ``{"topic": {"0": 23, "1": -2}}`` with -2 for earliest and
-1 for latest; timestamps (``startingOffsetsByTimestamp``) the same form in epoch milliseconds.
Where several starting options are given, Spark's precedence applies: ``startingTimestamp``,
then ``startingOffsetsByTimestamp``, then ``startingOffsets`` (likewise for ending).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from strom.common.errors import StromError
from strom.spark.client_config import (
    ClientConfig,
    parse_reader_client_config,
    parse_writer_client_config,
)

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
class TimestampBound:
    """Start or end by timestamp (ms): one for every partition, or per partition from JSON.

    A partition resolves to the first offset whose timestamp is at or after its timestamp
    (ListOffsets); partitions not named in ``specific`` use ``default`` (None: the offset
    bound's default applies to them).
    """

    default: int | None
    specific: Mapping[tuple[str, int], int] = field(default_factory=dict)

    def for_partition(self, topic: str, partition: int) -> int | None:
        return self.specific.get((topic, partition), self.default)


DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000
TIMESTAMP_STRATEGIES = ("error", "latest")


@dataclass(frozen=True, slots=True)
class SourceOptions:
    """The reader's parsed options.

    Invariants: exactly one of ``topics`` / ``pattern`` / ``assignment`` is set, matching
    ``strategy``; limits are positive when given.
    """

    bootstrap: str
    strategy: str  # one of SUBSCRIBE_OPTIONS
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[tuple[str, int], ...] = ()
    starting: OffsetBound = OffsetBound(EARLIEST)
    ending: OffsetBound = OffsetBound(LATEST)
    starting_by_timestamp: TimestampBound | None = None
    ending_by_timestamp: TimestampBound | None = None
    timestamp_strategy: str = "error"  # no offset at/after the timestamp: fail, or latest
    include_headers: bool = False
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    commit_group: str | None = None  # commitOffsetsToGroup: progress committed as this group
    client: ClientConfig = field(default_factory=ClientConfig)


@dataclass(frozen=True, slots=True)
class ExactlyOnceOptions:
    """The writer's ``exactlyOnce`` settings (see :mod:`strom.spark.exactly_once`).

    ``write_id`` names a batch write across reruns (a streaming query uses its own id from the
    checkpoint and leaves it None); ``batch_id`` is that write's batch number: a rerun with a
    batch id at or below the one a task already committed writes nothing for that task.
    """

    transactional_id_prefix: str = "strom-spark"
    write_id: str | None = None
    batch_id: int = 0


@dataclass(frozen=True, slots=True)
class SinkOptions:
    """The writer's parsed options (``exactly_once`` None: the at-least-once writer)."""

    bootstrap: str
    topic: str | None = None
    client: ClientConfig = field(default_factory=ClientConfig)
    exactly_once: ExactlyOnceOptions | None = None


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


def _positive(opts: Mapping[str, str], name: str) -> int | None:
    raw = opts.get(name.lower())
    if raw is None:
        return None
    try:
        value = int(raw.strip())
    except ValueError as exc:
        raise StromSourceOptionError(f"option {name!r} must be a number, got {raw!r}") from exc
    if value <= 0:
        raise StromSourceOptionError(f"option {name!r} must be positive, got {value}")
    return value


_DURATION_UNITS_MS = {
    "ms": 1, "millisecond": 1, "milliseconds": 1,
    "s": 1000, "sec": 1000, "second": 1000, "seconds": 1000,
    "m": 60_000, "min": 60_000, "minute": 60_000, "minutes": 60_000,
    "h": 3_600_000, "hour": 3_600_000, "hours": 3_600_000,
    "d": 86_400_000, "day": 86_400_000, "days": 86_400_000,
}


def parse_duration_ms(raw: str, name: str) -> int:
    """Spark-style durations: ``15m``, ``10 seconds``, ``500ms``, ``2h`` (bare numbers: ms)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", raw)
    unit = match.group(2).lower() if match else ""
    if not match or (unit and unit not in _DURATION_UNITS_MS):
        raise StromSourceOptionError(
            f"option {name!r} must be a duration like '15m', '30s' or '500ms', got {raw!r}")
    return int(match.group(1)) * _DURATION_UNITS_MS.get(unit, 1)


def parse_timestamp_bound(single: str | None, by_partition: str | None,
                          name: str) -> TimestampBound | None:
    """``startingTimestamp`` (one for all) wins over ``startingOffsetsByTimestamp`` (JSON)."""
    if single is not None and single.strip():
        try:
            value = int(single.strip())
        except ValueError as exc:
            raise StromSourceOptionError(
                f"option {name}Timestamp must be a timestamp in ms, got {single!r}") from exc
        if value < 0:
            raise StromSourceOptionError(f"option {name}Timestamp must be >= 0, got {value}")
        return TimestampBound(value)
    if by_partition is None or not by_partition.strip():
        return None
    option = f"{name}OffsetsByTimestamp"
    specific = _partition_json(by_partition, option)
    for (topic, p), ts in specific.items():
        if ts < 0:
            raise StromSourceOptionError(
                f"{option}: timestamp for {topic}-{p} must be >= 0, got {ts}")
    return TimestampBound(None, specific)


def _partition_json(raw: str, name: str) -> dict[tuple[str, int], int]:
    """``{"topic": {"0": 23}}`` → ``{("topic", 0): 23}`` with every value an integer."""
    try:
        parsed = json.loads(raw.strip())
    except ValueError as exc:
        raise StromSourceOptionError(
            f"{name} must be JSON like {{\"topic\": {{\"0\": 23, \"1\": -2}}}}, "
            f"got {raw!r}") from exc
    if not isinstance(parsed, dict):
        raise StromSourceOptionError(f"{name} JSON must be an object of topics, got {raw!r}")
    out: dict[tuple[str, int], int] = {}
    for topic, partitions in parsed.items():
        if not isinstance(partitions, dict):
            raise StromSourceOptionError(
                f"{name}: partitions of topic {topic!r} must be an object, got {partitions!r}")
        for partition, value in partitions.items():
            try:
                p = int(partition)
            except ValueError as exc:
                raise StromSourceOptionError(
                    f"{name}: partition {partition!r} of {topic!r} is not a number") from exc
            if not isinstance(value, int) or isinstance(value, bool):
                raise StromSourceOptionError(
                    f"{name}: value for {topic}-{p} must be an integer, got {value!r}")
            out[(topic, p)] = value
    return out


def _bool(opts: Mapping[str, str], name: str, *, default: bool = False) -> bool:
    raw = opts.get(name.lower(), "true" if default else "false").strip().lower()
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
    if not text.startswith("{"):
        raise StromSourceOptionError(
            f"{name} must be 'earliest', 'latest' or JSON like "
            f'{{"topic": {{"0": 23, "1": -2}}}}, got {raw!r}')
    specific = _partition_json(text, name)
    for (topic, p), offset in specific.items():
        if offset < EARLIEST:
            raise StromSourceOptionError(
                f"{name}: offset for {topic}-{p} must be an integer >= -2, got {offset!r}")
        if offset == EARLIEST and not allow_earliest:
            raise StromSourceOptionError(f"{name}: earliest (-2) is not allowed here")
        if offset == LATEST and not allow_latest:
            raise StromSourceOptionError(f"{name}: latest (-1) is not allowed here")
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


def parse_source_options(options: Mapping[str, str], *, streaming: bool) -> SourceOptions:
    """Check and parse the reader's options (raises :class:`StromSourceOptionError`).

    Without ``startingOffsets`` a streaming query starts at the latest offsets and a batch
    query at the earliest, as Spark's Kafka source does (a query switched from ``kafka``
    to ``strom`` by its format name reads the same records).
    """
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
    starting = parse_offset_bound(opts.get("startingoffsets"), "startingOffsets",
                                  LATEST if streaming else EARLIEST)
    ending = parse_offset_bound(opts.get("endingoffsets"), "endingOffsets", LATEST,
                                allow_earliest=False)
    strategy_name = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy_name not in TIMESTAMP_STRATEGIES:
        raise StromSourceOptionError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest', "
            f"got {strategy_name!r}")
    min_rows = _positive(opts, "minOffsetsPerTrigger")
    delay_raw = opts.get("maxtriggerdelay")
    delay_ms = (parse_duration_ms(delay_raw, "maxTriggerDelay") if delay_raw is not None
                else DEFAULT_MAX_TRIGGER_DELAY_MS)
    commit_group = opts.get("commitoffsetstogroup", "").strip() or None
    return SourceOptions(
        bootstrap=_bootstrap(opts), strategy=strategy, topics=topics, pattern=pattern,
        assignment=assignment, starting=starting, ending=ending,
        starting_by_timestamp=parse_timestamp_bound(
            opts.get("startingtimestamp"), opts.get("startingoffsetsbytimestamp"), "starting"),
        ending_by_timestamp=parse_timestamp_bound(
            opts.get("endingtimestamp"), opts.get("endingoffsetsbytimestamp"), "ending"),
        timestamp_strategy=strategy_name,
        include_headers=_bool(opts, "includeHeaders"),
        min_partitions=_positive(opts, "minPartitions"),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", default=True),
        max_offsets_per_trigger=_positive(opts, "maxOffsetsPerTrigger"),
        min_offsets_per_trigger=min_rows, max_trigger_delay_ms=delay_ms,
        commit_group=commit_group,
        client=parse_reader_client_config(_client_options(opts)),
    )


EXACTLY_ONCE_OPTIONS = ("transactionalIdPrefix", "writeId", "batchId")


def parse_sink_options(options: Mapping[str, str], *, streaming: bool = False) -> SinkOptions:
    """Check and parse the writer's options (raises :class:`StromSourceOptionError`)."""
    opts = _lower(options)
    topic = opts.get("topic")
    client = parse_writer_client_config(_client_options(opts))
    return SinkOptions(bootstrap=_bootstrap(opts), topic=topic.strip() if topic else None,
                       client=client,
                       exactly_once=_exactly_once(opts, client, streaming=streaming))


def _exactly_once(opts: Mapping[str, str], client: ClientConfig, *,
                  streaming: bool) -> ExactlyOnceOptions | None:
    given = [name for name in EXACTLY_ONCE_OPTIONS if name.lower() in opts]
    if not _bool(opts, "exactlyOnce"):
        if given:
            raise StromSourceOptionError(f"option {given[0]!r} needs exactlyOnce=true")
        return None
    if not client.idempotent or client.acks != -1:
        raise StromSourceOptionError(
            "exactlyOnce needs kafka.acks=all and kafka.enable.idempotence=true")
    prefix = opts.get("transactionalidprefix", "strom-spark").strip()
    if not prefix:
        raise StromSourceOptionError("option 'transactionalIdPrefix' must not be empty")
    if streaming:
        for name in ("writeId", "batchId"):
            if name.lower() in opts:
                raise StromSourceOptionError(
                    f"option {name!r} is for batch writes; a streaming query's "
                    "transactions are named by its query id and micro-batch id")
        return ExactlyOnceOptions(prefix)
    write_id = opts.get("writeid", "").strip()
    if not write_id:
        raise StromSourceOptionError(
            "an exactlyOnce batch write needs option 'writeId' (a name that stays the same "
            "when the write is run again, so a rerun is recognised)")
    raw = opts.get("batchid", "0").strip()
    if not raw.isdigit():
        raise StromSourceOptionError(f"option 'batchId' must be an integer >= 0, got {raw!r}")
    return ExactlyOnceOptions(prefix, write_id, int(raw))
