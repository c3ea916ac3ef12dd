"""Requests/s and p50/p99 latency of the gateway under 64 concurrent clients, with and without
one 1 MB prompt in flight (BENCHMARKS.md, "The gateway under load").

    python bench/gateway_load.py [--clients 64] [--requests 512] [--max-tokens 8]

The server is ``rlvr serve``'s (``GatewayServer``, uvicorn, the transformers engine on the tiny
model, CPU) on 127.0.0.1; the clients are one ``httpx.AsyncClient`` each, every one sending
short chat requests back to back. "With" keeps one 1 MB prompt request going the whole time
(each is refused with 400 past the context once rendered, then sent again).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from rlvr.agents.gateway import Gateway
from rlvr.agents.gateway.http import http_client_module
from rlvr.agents.gateway.server import GatewayServer


async def _load(url: str, clients: int, requests: int, max_tokens: int, big: bool
                ) -> dict[str, float]:
    httpx = http_client_module()
    latencies: list[float] = []
    left = [requests]
    body = {"model": "m", "max_tokens": max_tokens, "temperature": 1.0,
            "messages": [{"role": "user", "content": "What is 2 plus 3?"}]}
    stop = asyncio.Event()
    bigs = [0]

    async def client() -> None:
        async with httpx.AsyncClient(timeout=600) as c:
            while left[0] > 0:
                left[0] -= 1
                t0 = time.perf_counter()
                r = await c.post(f"{url}/chat/completions", json=body)
                assert r.status_code == 200, r.text
                latencies.append(time.perf_counter() - t0)

    async def hog() -> None:
        prompt = {"model": "m", "max_tokens": 1,
                  "messages": [{"role": "user", "content": "hello world 123 " * (1 << 16)}]}
        async with httpx.AsyncClient(timeout=600) as c:
            while not stop.is_set():
                await c.post(f"{url}/chat/completions", json=prompt)
                bigs[0] += 1

    hogging = asyncio.ensure_future(hog()) if big else None
    if big:
        await asyncio.sleep(0.5)
    t0 = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(clients)))
    wall = time.perf_counter() - t0
    stop.set()
    if hogging is not None:
        await hogging
    latencies.sort()
    return {"requests_per_s": len(latencies) / wall,
            "p50_s": statistics.median(latencies),
            "p99_s": latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))],
            "wall_s": wall, "big_prompts_done": bigs[0]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--requests", type=int, default=512)
    parser.add_argument("--max-tokens", type=int, default=8)
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.agents.hf.engine import TransformersEngine
    from rlvr.tiny import tiny_model_dir

    path = tiny_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    engine = TransformersEngine(model, tokenizer, max_batch_size=64)
    gateway = Gateway(engine, tokenizer)
    with GatewayServer(gateway) as server:
        for big in (False, True):
            out = asyncio.run(_load(server.url, args.clients, args.requests, args.max_tokens,
                                    big))
            print(json.dumps({"one_1MB_prompt_in_flight": big, **vars(args), **out}),
                  flush=True)
    engine.close()


if __name__ == "__main__":
    main()
