"""The controller mutation quota of one CreateTopics / CreatePartitions / DeleteTopics
request (KIP-599).

Each partition created, added or deleted is one mutation. In *strict* mode (CreateTopics
v6+, DeleteTopics v5+, CreatePartitions v3+) a topic met while the quota is already
exceeded is refused with THROTTLING_QUOTA_EXCEEDED and the throttle time is the time until
it no longer is; a topic that exceeds the quota is accepted whole and throttles nothing (the
next one pays), as Kafka's ``StrictControllerMutationQuota``. Older versions are
*permissive*: everything is done and the throttle time says how far over the quota went.
The throttle time goes into ``Request.throttle_ms`` (the dispatcher puts it in the response
and mutes the connection). ``validate_only`` requests
are not counted. Without any stored quota this is one attribute check.
"""

from __future__ import annotations

from strom.broker.dispatch import Request
from strom.broker.quotas.manager import ClientQuotas, user_of
from strom.common.errors import error_class

#: The first strict version per API key (CreateTopics 19, DeleteTopics 20, CreatePartitions 37).
STRICT_FROM = {19: 6, 20: 5, 37: 3}


class MutationQuota:
    def __init__(self, quotas: ClientQuotas, request: Request) -> None:
        self._quotas = quotas if quotas.active else None
        self._request = request
        self._user = user_of(request.conn.principal)
        self._client = request.header.client_id or ""
        self._strict = request.version >= STRICT_FROM.get(request.header.api_key, 1 << 15)

    def check(self) -> None:
        """Raise THROTTLING_QUOTA_EXCEEDED in strict mode once the quota is exceeded."""
        quotas = self._quotas
        if quotas is None or not self._strict:
            return
        throttle_s = quotas.mutation_throttle(self._user, self._client)
        if throttle_s > 0:
            self._throttle(throttle_s)
            raise error_class("THROTTLING_QUOTA_EXCEEDED")(
                "The throttling quota has been exceeded.")

    def record(self, partitions: int) -> None:
        quotas = self._quotas
        if quotas is None:
            return
        throttle_s = quotas.record_mutations(self._user, self._client, partitions)
        if not self._strict:
            self._throttle(throttle_s)

    def _throttle(self, throttle_s: float) -> None:
        request = self._request
        request.throttle_ms = max(request.throttle_ms, round(throttle_s * 1000))
