"""The follower's cost of one replication round by the number of partitions it follows.

    python bench/replication_round_bench.py [--partitions 100,1000,3000] [--rounds 2000]
                                            [--source DIR ...]

A round is what a replica fetcher does per Fetch once a session exists: build the request
(``ReplicaFetcher.fetch_request``), turn it into the incremental wire request
(``FollowerFetchSession.build``) and encode it, then take the answer
(``on_fetch_response``) — here one partition got one record, as when an acks=all producer
writes to one partition of many. Every acks=all produce waits for such a round, so its cost
per partition followed bounds how many partitions a follower can keep in sync while serving
a producer. The followed partitions are stand-ins (their log is not touched: a round costs
the fetcher and the session, not the append); ``--source DIR`` runs the same measurement
with another source tree first on the path (before / after), in a process of its own each.

Reported: microseconds per round, median of 5 repetitions.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import uuid
from types import SimpleNamespace
from typing import Any


def measure(partitions: int, rounds: int) -> float:
    """Microseconds per follower round with ``partitions`` followed (median of 5)."""
    from strom.broker.follower_session import FollowerFetchSession
    from strom.broker.replica_fetch import encode_follower_fetch_request
    from strom.common.types import TopicPartition
    from strom.replication.fetcher import FetchAnswer, FetcherSettings, Phase, ReplicaFetcher

    topic_id = uuid.uuid4()
    hosted: dict[TopicPartition, Any] = {
        TopicPartition(f"t{i}", 0): SimpleNamespace(
            topic_id=topic_id, log_start_offset=0, log_end_offset=0, is_leader=False)
        for i in range(partitions)}

    class Logs:
        def follower(self, tp: TopicPartition) -> Any:
            return hosted.get(tp)

        def append_fetched(self, partition: Any, records: memoryview) -> None:
            partition.log_end_offset += 1

        def storage_failed(self, exc: OSError, doing: str) -> None:
            raise exc

    fetcher = ReplicaFetcher(0, 0, FetcherSettings(1), Logs())
    fetcher.add_partitions(dict.fromkeys(hosted, 0))
    for tp in hosted:  # past truncation: every partition fetching from its log end
        state = fetcher.state(tp)
        assert state is not None
        set_phase = getattr(fetcher, "_set_phase", None)
        if set_phase is not None:
            set_phase(state, Phase.FETCHING)
        else:
            state.phase = Phase.FETCHING
        state.fetch_offset = 0
        state.topic_id = topic_id
    session = FollowerFetchSession()
    first = fetcher.fetch_request(0)
    assert first is not None
    session.build(first)
    session.answered(1)
    hot = next(iter(hosted))
    part = hosted[hot]
    part.update_follower_high_watermark = lambda hw: None
    part.update_follower_log_start = lambda start: None
    samples = []
    for _ in range(5):
        began = time.perf_counter()
        for i in range(rounds):
            now = 1 + i // 10  # milliseconds: a full rebuild once a second, as in a broker
            request = fetcher.fetch_request(now)
            assert request is not None
            encode_follower_fetch_request(session.build(request))
            session.answered(1)
            answer = FetchAnswer(0, part.log_end_offset + 1, 0, b"x")
            fetcher.on_fetch_response(request, {hot: answer}, now, omitted_unchanged=True)
        samples.append((time.perf_counter() - began) / rounds * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--partitions", default="100,1000,3000")
    parser.add_argument("--rounds", type=int, default=2000)
    parser.add_argument("--source", action="append", default=[], metavar="DIR")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    counts = [int(n) for n in args.partitions.split(",")]
    if args.child:
        print(" ".join(f"{measure(n, args.rounds):.1f}" for n in counts))
        return
    trees = [("this tree", None)] + [(s, s) for s in args.source]
    print("| tree | " + " | ".join(f"{n:,} partitions µs/round" for n in counts) + " |")
    print("|---|" + "---:|" * len(counts))
    for label, source in trees:
        env = dict(os.environ)
        if source is not None:
            env["PYTHONPATH"] = os.path.abspath(source)
        out = subprocess.run([sys.executable, __file__, "--child", "--partitions",
                              args.partitions, "--rounds", str(args.rounds)],
                             env=env, check=True, capture_output=True, text=True).stdout
        print(f"| {label} | " + " | ".join(out.split()) + " |")


if __name__ == "__main__":
    main()
