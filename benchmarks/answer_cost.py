"""Client CPU per request: a non-streamed embeddings answer against a streamed chat answer.

A loopback server in its own process answers at once (no delay): ``/v1/embeddings`` with
one embedding of ``--dim`` floats per input (``--batch`` inputs), ``/v1/chat/completions``
with ``--tokens`` SSE events and ``[DONE]`` in one write. The real client (``--transport``,
``fast`` by default) sends ``--requests`` requests, ``--concurrency`` at a time, per API;
we print the client process's CPU time (user + system) per request and its wall time.

    python benchmarks/answer_cost.py [--requests 2000] [--concurrency 8] [--batch 8] [--dim 384]

Bounded (requests), loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

from _bench import server_process, use_uvloop
from aiohttp import web

from loadgen.client.dialects import DialectOptions, get_dialect
from loadgen.client.transports import TransportConfig, make_transport
from loadgen.records import RequestRecord, RequestSpec

_CFG = {"batch": int(os.environ.get("ANSWER_BATCH", "8")), "dim": int(os.environ.get("ANSWER_DIM", "384"))}
_CFG["tokens"] = int(os.environ.get("ANSWER_TOKENS", "64"))


def _routes(app: web.Application) -> None:
    batch, dim, tokens = _CFG["batch"], _CFG["dim"], _CFG["tokens"]
    vector = [round(0.001 * (i % 997) - 0.5, 6) for i in range(dim)]
    emb = json.dumps(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": i, "embedding": vector} for i in range(batch)],
            "model": "m",
            "usage": {"prompt_tokens": 512, "total_tokens": 512},
        }
    ).encode()
    event = 'data: {"id":"x","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":" t"}}]}\n\n'
    last = (
        'data: {"id":"x","choices":[{"index":0,"delta":{},"finish_reason":"length"}],'
        f'"usage":{{"prompt_tokens":512,"completion_tokens":{tokens}}}}}\n\ndata: [DONE]\n\n'
    )
    sse = (event * tokens + last).encode()

    async def embeddings(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(body=emb, content_type="application/json")

    async def chat(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(sse)
        await resp.write_eof()
        return resp

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": "m"}]})

    app.router.add_post("/v1/embeddings", embeddings)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)


async def _measure(url: str, api: str, transport: str, n: int, conc: int, batch: int) -> tuple[float, float, int]:
    options = DialectOptions(model="m", inputs=(batch,))
    t = make_transport(transport, TransportConfig(url, get_dialect(api), options, max_connections=conc))
    prompt = " ".join(f"w{i}" for i in range(512))
    ok = 0

    async def user(u: int, k: int) -> None:
        nonlocal ok
        for j in range(k):
            i = u * n + j
            rec = RequestRecord(index=i)
            await t.send(RequestSpec(index=i, prompt=prompt, prompt_tokens=512, max_tokens=_CFG["tokens"]), rec)
            ok += rec.ok

    await user(0, 20)  # warm the connections and caches
    ok = 0
    per = n // conc
    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(user(u + 1, per) for u in range(conc)))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    await t.aclose()
    return cpu / (per * conc), wall, ok


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--transport", default="fast")
    args = ap.parse_args()
    os.environ.update(ANSWER_BATCH=str(args.batch), ANSWER_DIM=str(args.dim), ANSWER_TOKENS=str(args.tokens))
    _CFG.update(batch=args.batch, dim=args.dim, tokens=args.tokens)
    use_uvloop()
    with server_process(_routes) as url:
        rows: list[tuple[str, Any, Any, Any]] = []
        for api, what in (
            ("embeddings", f"{args.batch} inputs x {args.dim} floats"),
            ("chat", f"{args.tokens} events"),
        ):
            cpu, wall, ok = asyncio.run(_measure(url, api, args.transport, args.requests, args.concurrency, args.batch))
            rows.append((api, what, cpu, (wall, ok)))
    print(f"transport {args.transport}, {args.requests} requests per API, {args.concurrency} at a time")
    for api, what, cpu, (wall, ok) in rows:
        print(f"{api:<11} {what:<24} client CPU {cpu * 1e6:8.1f} us/request   wall {wall:6.2f} s   ok {ok}")


if __name__ == "__main__":
    main()
