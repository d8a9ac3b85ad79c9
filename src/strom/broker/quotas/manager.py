"""Client quotas enforced by this broker (Kafka's ``ClientQuotaManager`` family, KIP-13 /
KIP-55 / KIP-124 / KIP-599).

One :class:`ClientQuotas` per broker, owned by the event-loop thread; the server subscribes
:meth:`ClientQuotas.configure` to the metadata store, so quotas altered through
AlterClientQuotas apply at once. Four keys, each with its own meters:

* ``producer_byte_rate`` — bytes of Produce requests per second;
* ``consumer_byte_rate`` — bytes of Fetch responses per second (replica fetches excepted);
* ``request_percentage`` — time spent handling requests, in percent of one second per second
  (Kafka counts network + handler thread time; strom the synchronous handling on the event
  loop, which is all the CPU a request gets);
* ``controller_mutation_rate`` — partitions created / added / deleted per second, as a
  token bucket (KIP-599).

Which quota applies, and who shares its meter, is :mod:`.entities`. With no quota stored,
:attr:`ClientQuotas.active` is False and the data path checks nothing else.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from strom.broker.quotas.entities import MeterKey, resolve
from strom.broker.quotas.rate import SampledRate, TokenBucket
from strom.metadata.image import MetadataImage, QuotaEntity

PRODUCE = "producer_byte_rate"
FETCH = "consumer_byte_rate"
REQUEST = "request_percentage"
MUTATION = "controller_mutation_rate"
#: Kafka bounds request-time throttles by one window (``ClientRequestQuotaManager``).
REQUEST_THROTTLE_CAP_S = 1.0
#: Meters and cached resolutions kept before the unused ones are dropped (Kafka expires a
#: client's sensors after an hour without use): many client ids cannot grow memory unbounded.
MAX_METERS = 10_000


def user_of(principal: str) -> str:
    """The quota user of a principal: its name (``User:alice`` → ``alice``)."""
    return principal.partition(":")[2] or principal


class ClientQuotas:
    """Meters and bounds of every client quota; see the module doc."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, samples: int = 11,
                 window_s: float = 1.0) -> None:
        self._clock = clock
        self._samples = samples
        self._window = window_s
        self._quotas: dict[QuotaEntity, dict[str, float]] = {}
        self._resolved: dict[tuple[str, str, str], tuple[float, MeterKey] | None] = {}
        self._rates: dict[tuple[str, MeterKey], SampledRate] = {}
        self._buckets: dict[MeterKey, TokenBucket] = {}
        #: Some quota is stored: the only thing the data path looks at when none is.
        self.active = False

    def configure(self, image: MetadataImage) -> None:
        """Take the quotas of ``image`` (a metadata-store subscriber); ``ip`` entities are
        connection rates (:mod:`strom.broker.connection_rates`), not this module's."""
        quotas = {e: dict(v) for e, v in image.client_quotas.items()
                  if all(t != "ip" for t, _ in e)}
        if quotas == self._quotas:
            return
        self._quotas = quotas
        self._resolved.clear()
        self.active = bool(self._quotas)

    def _bound(self, key: str, user: str, client_id: str) -> tuple[float, MeterKey] | None:
        cache_key = (key, user, client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            if len(self._resolved) >= MAX_METERS:
                self._resolved.clear()
            found = self._resolved[cache_key] = resolve(self._quotas, key, user, client_id)
            return found

    def record(self, key: str, user: str, client_id: str, value: float) -> float:
        """Record ``value`` against quota ``key`` (a rate key); the throttle time in seconds."""
        found = self._bound(key, user, client_id)
        if found is None:
            return 0.0
        bound, meter = found
        now = self._clock()
        rate = self._rates.get((key, meter))
        if rate is None:
            if len(self._rates) >= MAX_METERS:
                self._rates = {k: r for k, r in self._rates.items() if r.rate(now) > 0}
            rate = self._rates[(key, meter)] = SampledRate(now, self._samples, self._window)
        rate.record(value, now)
        throttle = rate.throttle_s(bound, now)
        if key == REQUEST:
            throttle = min(throttle, REQUEST_THROTTLE_CAP_S)
        return throttle

    def _bucket(self, user: str, client_id: str) -> tuple[float, TokenBucket] | None:
        found = self._bound(MUTATION, user, client_id)
        if found is None:
            return None
        bound, meter = found
        bucket = self._buckets.get(meter)
        if bucket is None:
            if len(self._buckets) >= MAX_METERS:
                self._buckets.clear()  # forgives throttled clients: only past MAX_METERS
            bucket = self._buckets[meter] = TokenBucket(bound, self._burst_s, self._clock())
        return bound, bucket

    @property
    def _burst_s(self) -> float:
        return self._samples * self._window

    def mutation_throttle(self, user: str, client_id: str) -> float:
        """How long until the controller mutation quota is no longer exceeded (0: it is not;
        KIP-599 strict mode then refuses the topic with THROTTLING_QUOTA_EXCEEDED)."""
        found = self._bucket(user, client_id)
        if found is None:
            return 0.0
        return found[1].throttle_s(found[0], self._burst_s, self._clock())

    def record_mutations(self, user: str, client_id: str, partitions: int) -> float:
        """Take ``partitions`` mutations; the throttle time in seconds."""
        found = self._bucket(user, client_id)
        if found is None or partitions <= 0:
            return 0.0
        return found[1].record(partitions, found[0], self._burst_s, self._clock())
