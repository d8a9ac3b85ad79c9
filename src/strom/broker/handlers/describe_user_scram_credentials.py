"""DescribeUserScramCredentials (50), v0: each user's SCRAM mechanisms and iteration counts
(never a key), from :mod:`strom.controller.scram_credentials`."""

from __future__ import annotations

from strom.broker.dispatch import Request, ResponseParts
from strom.broker.state import BrokerState
from strom.common.acl import ResourceType
from strom.controller.scram_credentials import code, describe
from strom.protocol import api
from strom.protocol.versions import ApiKey

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS


class DescribeUserScramCredentialsHandler:
    def __init__(self, state: BrokerState) -> None:
        self._state = state

    def __call__(self, request: Request) -> ResponseParts:
        version = request.version
        body = api.decode_request(API_KEY, version, request.body)
        if denied := self._state.access.check(request, ResourceType.CLUSTER):  # DESCRIBE
            return [api.response(API_KEY, version, {
                "throttle_time_ms": 0, "error_code": denied, "error_message": None,
                "results": []})]
        users = None if body.users is None else [str(u.name) for u in body.users]
        results = [
            {"user": user, "error_code": code(error),
             "error_message": None if error is None else error[1],
             "credential_infos": [{"mechanism": m, "iterations": i} for m, i in infos]}
            for user, error, infos in describe(self._state.store.image, users)]
        return [api.response(API_KEY, version, {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "results": results})]
