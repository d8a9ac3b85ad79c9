"""Durable mode (flush.messages=1): acknowledged means fsynced; concurrent requests share
fsync rounds; acks=0 data is flushed too; an unverified transactional write is refused."""

from __future__ import annotations

import asyncio
import inspect
import struct
from pathlib import Path
from typing import Any

from strom.broker.dispatch import ConnectionContext, Dispatcher
from strom.broker.handlers import build_handlers
from strom.broker.server import BrokerServer
from strom.common.config import BrokerConfig
from strom.common.errors import ErrorCode
from strom.protocol import api
from strom.protocol.records.builder import BatchBuilder
from strom.protocol.versions import ApiKey


def produce_frame(topic: str, partition: int, acks: int, txn: str | None = None) -> memoryview:
    builder = (BatchBuilder(producer_id=4242, producer_epoch=0, base_sequence=0,
                            transactional=True) if txn else BatchBuilder())
    builder.append(0, None, b"durable")
    body = api.request(ApiKey.PRODUCE, 9, {
        "transactional_id": txn, "acks": acks, "timeout_ms": 30000,
        "topic_data": [{"name": topic, "partition_data": [
            {"index": partition, "records": builder.build()}]}]})
    header = struct.pack(">hhih", ApiKey.PRODUCE, 9, 1, 1) + b"t" + b"\x00"
    return memoryview(bytearray(header + body))


async def run(dispatcher: Dispatcher, frame: memoryview) -> Any:
    result = dispatcher.dispatch(ConnectionContext("test"), frame)
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return None
    raw = b"".join(bytes(p) for p in result)  # type: ignore[arg-type]
    return api.decode_response(ApiKey.PRODUCE, 9, raw[4 + 5:])


def test_durable_acknowledgement_and_group_commit(tmp_path: Path) -> None:
    async def scenario() -> None:
        server = BrokerServer(BrokerConfig({"listeners": "PLAINTEXT://127.0.0.1:0",
                                            "log.dirs": str(tmp_path),
                                            "log.flush.interval.messages": 1}))
        await server.start()
        try:
            state = server.state
            assert state is not None
            state.create_topic("d", 4)
            dispatcher = Dispatcher(build_handlers(state))
            logs = [state.replicas.get("d", p).log for p in range(4)]  # type: ignore[union-attr]
            # 200 concurrent acks=1 requests over 4 partitions.
            responses = await asyncio.gather(*(
                run(dispatcher, produce_frame("d", i % 4, 1)) for i in range(200)))
            assert all(r.responses[0].partition_responses[0].error_code == 0 for r in responses)
            assert all(plog.recovery_point == plog.log_end_offset == 50 for plog in logs)
            assert state.replicas.flusher.rounds <= 3  # 200 requests shared one or two fsync rounds
            # acks=0: no response, but the data still becomes durable.
            assert await run(dispatcher, produce_frame("d", 0, 0)) is None
            for _ in range(100):
                if logs[0].recovery_point == 51:
                    break
                await asyncio.sleep(0.01)
            assert logs[0].recovery_point == logs[0].log_end_offset == 51
            # A transactional batch the coordinator cannot vouch for (no such transaction,
            # no __transaction_state yet): refused with Kafka's retriable error, nothing written.
            refused = await run(dispatcher, produce_frame("d", 1, -1, txn="tx"))
            code = refused.responses[0].partition_responses[0].error_code
            assert code == ErrorCode.NOT_ENOUGH_REPLICAS  # type: ignore[attr-defined]
            assert logs[1].log_end_offset == 50
        finally:
            await server.stop()

    asyncio.run(scenario())
