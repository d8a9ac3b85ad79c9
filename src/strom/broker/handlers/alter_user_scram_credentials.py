"""AlterUserScramCredentials (51), v0: add, replace or delete users' SCRAM credentials in
the metadata store (:mod:`strom.controller.scram_credentials`); one result per user.

Without ACLs (issue 12's authorization part) any connection that may send requests may
alter credentials, as in a Kafka cluster without an authorizer."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
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
        results = alter(self._state.store, deletions, upsertions)
        return [api.response(API_KEY, version, {"throttle_time_ms": 0, "results": [
            {"user": user, "error_code": code(error),
             "error_message": None if error is None else error[1]}
            for user, error in results.items()]})]
