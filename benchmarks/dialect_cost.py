"""Client CPU per event of each dialect's parser: ``parse_event`` alone, and ``decode`` +
``parse_event`` (what the stream does per event), over realistic content-delta events.

The events are what each API streams for one answer token: an OpenAI chat chunk
(``choices[0].delta.content``), a Responses ``response.output_text.delta`` (with its
``item_id``, indices and ``sequence_number``) and a Messages ``content_block_delta``
(``text_delta``). Each row is the best of ``--repeat`` runs over ``--events`` events, in
µs per event, and its ratio to chat's.

    python benchmarks/dialect_cost.py [--events 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

from loadgen.client.dialects import get_dialect

EVENTS = {
    "chat": {
        "id": "chatcmpl-7f3a",
        "object": "chat.completion.chunk",
        "created": 1718000000,
        "model": "m",
        "choices": [{"index": 0, "delta": {"content": " tok"}, "logprobs": None, "finish_reason": None}],
    },
    "responses": {
        "type": "response.output_text.delta",
        "item_id": "msg_68a1f0c2",
        "output_index": 0,
        "content_index": 0,
        "delta": " tok",
        "sequence_number": 12,
    },
    "messages": {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": " tok"}},
}


def _best(fn: Callable[[], None], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        best = min(best, time.perf_counter_ns() - t0)
    return best


def measure(api: str, n: int, repeat: int) -> tuple[float, float]:
    """(µs per event of parse_event, µs per event of decode + parse_event) for ``api``."""
    dialect = get_dialect(api)
    parse, decode = dialect.parse_event, dialect.decode
    datas = [json.dumps(EVENTS[api], separators=(",", ":"))] * n
    objs: list[Any] = [decode(d) for d in datas]
    assert parse(objs[0]).has_output and parse(objs[0]).text == " tok"

    def parse_only() -> None:
        for obj in objs:
            parse(obj)

    def both() -> None:
        for d in datas:
            parse(decode(d))

    return _best(parse_only, repeat) / n / 1e3, _best(both, repeat) / n / 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = {api: measure(api, args.events, args.repeat) for api in EVENTS}
    chat = rows["chat"]
    print(f"{'api':<10} {'parse µs/ev':>12} {'vs chat':>8} {'decode+parse µs/ev':>19} {'vs chat':>8}")
    for api, (parse, both) in rows.items():
        print(f"{api:<10} {parse:>12.3f} {parse / chat[0]:>8.2f} {both:>19.3f} {both / chat[1]:>8.2f}")


if __name__ == "__main__":
    main()
