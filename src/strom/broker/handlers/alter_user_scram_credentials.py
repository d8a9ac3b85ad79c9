"""AlterUserScramCredentials (51), v0: add, replace or delete users' SCRAM credentials in
the metadata store (:mod:`strom.controller.scram_credentials`); one result per user.

With an authorizer, ALTER on the cluster is required (CLUSTER_AUTHORIZATION_FAILED for every
user); without one any connection that may send requests may alter credentials, as in Kafka."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.controller.scram_credentials import Deletion, Upsertion, alter, code
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS


class AlterUserScramCredentialsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        deletions = [Deletion(str(d.name), int(d.mechanism)) for d in body.deletions]
        upsertions = [Upsertion(str(u.name), int(u.mechanism), int(u.iterations),
                                bytes(u.salt or b""), bytes(u.salted_password or b""))
                      for u in body.upsertions]
        if denied := self._state.access.check(request, ResourceType.CLUSTER):  # ALTER
            users = dict.fromkeys([d.user for d in deletions] + [u.user for u in upsertions])
            return [api.response(API_KEY, version, {"throttle_time_ms": 0, "results": [
                {"user": user, "error_code": denied, "error_message": None}
                for user in users]})]
        results = alter(self._state.store, deletions, upsertions)
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "results": [
            {"user": user, "error_code": code(error),
             "error_message": None if error is None else error[1]}
            for user, error in results.items()]})]
