"""The gateway's overhead per call: the same generation through the engine directly, through the
gateway in-process (the ``openai.AsyncOpenAI`` client over httpx's ASGI transport, as the episode
runner plays agent functions), and over real HTTP (uvicorn on 127.0.0.1).

Each call renders a short chat (one user message) and generates ``--tokens`` tokens greedily on
the tiny quickstart model (transformers engine), the paths interleaved call by call;
"in-process, episode" opens a fresh episode
endpoint per call (a client per episode, the call kept token-exact), as the runner does for agent
functions. ``sequential``: one call at a time, median
milliseconds per call; ``concurrent``: ``--concurrency`` calls in flight, calls per second. The
direct column renders the messages with the same chat template, so the difference is the
gateway's own work: request parsing, the episode capture, response objects, the client's, and
(for HTTP) the socket.

    .venv/bin/python bench/bench_gateway.py [--calls 200] [--tokens 4] [--concurrency 16]

Prints the table and writes ``bench/results/gateway.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import rlvr  # noqa: F401  # before torch: the OpenMP wait policy of `rlvr train`

REPO = Path(__file__).resolve().parents[1]
MESSAGES = [{"role": "user", "content": "What is 347 times 58?"}]


async def _direct(engine: Any, gateway: Any, tokens: int) -> Any:
    from rlvr.agents.engine import SamplingParams

    prompt = gateway.templates.render(MESSAGES, None)
    params = SamplingParams(temperature=0, max_new_tokens=tokens,
                            stop_token_ids=tuple(sorted(gateway.templates.end_ids)))
    out = await engine.generate(prompt, params)
    return gateway.templates.reply_text(out.token_ids, ())[0]


async def _client_call(client: Any, tokens: int) -> Any:
    reply = await client.chat.completions.create(model="tiny", messages=MESSAGES,
                                                 max_tokens=tokens, temperature=0)
    return reply.choices[0].message.content


async def _measure(paths: dict[str, Any], calls: int, concurrency: int
                   ) -> dict[str, dict[str, float]]:
    """Sequential latency with the paths interleaved call by call (load drifts hit all alike),
    then each path's throughput with ``concurrency`` calls in flight."""
    for call in paths.values():  # warm-up
        for _ in range(5):
            await call()
    times: dict[str, list[float]] = {name: [] for name in paths}
    for _ in range(calls):
        for name, call in paths.items():
            t0 = time.perf_counter()
            await call()
            times[name].append(time.perf_counter() - t0)
    out = {}
    for name, call in paths.items():
        gate = asyncio.Semaphore(concurrency)

        async def one(call: Any = call, gate: asyncio.Semaphore = gate) -> None:
            async with gate:
                await call()

        t0 = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(calls)))
        wall = time.perf_counter() - t0
        ts = sorted(times[name])
        out[name] = {"ms_per_call": 1000 * statistics.median(ts),
                     "ms_p90": 1000 * ts[int(0.9 * len(ts))], "calls_per_s": calls / wall}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    import openai
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlvr.agents.gateway import Gateway, create_app
    from rlvr.agents.gateway.http import http_client_module
    from rlvr.agents.gateway.server import GatewayServer
    from rlvr.agents.hf.engine import TransformersEngine
    from rlvr.tiny import tiny_model_dir

    torch.set_num_threads(1)
    path = tiny_model_dir()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    engine = TransformersEngine(model, tokenizer, max_batch_size=args.concurrency)
    gateway = Gateway(engine, tokenizer, model_name="tiny")
    httpx = http_client_module()
    server = GatewayServer(gateway).start()

    async def run() -> dict[str, dict[str, float]]:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(gateway)),
                                     base_url="http://gateway") as http:
            client = openai.AsyncOpenAI(base_url="http://gateway/v1", api_key="x",
                                        http_client=http, max_retries=0)
            remote = openai.AsyncOpenAI(base_url=server.url, api_key="x", max_retries=0)

            async def on_episode() -> Any:  # as the runner: an endpoint per episode, kept
                episode = gateway.open_episode()
                ep = client.with_options(
                    base_url=f"http://gateway/episodes/{episode.capture.key}/v1")
                try:
                    return await _client_call(ep, args.tokens)
                finally:
                    gateway.close_episode(episode.capture.key)

            return await _measure({
                "direct": lambda: _direct(engine, gateway, args.tokens),
                "gateway in-process": lambda: _client_call(client, args.tokens),
                "in-process, episode": on_episode,
                "gateway HTTP": lambda: _client_call(remote, args.tokens),
            }, args.calls, args.concurrency)

    try:
        results = asyncio.run(run())
    finally:
        server.stop()
        engine.close()
    base = results["direct"]["ms_per_call"]
    print(f"{'path':<20} {'ms/call (median)':>17} {'p90':>8} {'overhead ms':>12} "
          f"{'calls/s @' + str(args.concurrency):>14}")
    for name, r in results.items():
        print(f"{name:<20} {r['ms_per_call']:>17.2f} {r['ms_p90']:>8.2f} "
              f"{r['ms_per_call'] - base:>12.2f} {r['calls_per_s']:>14.1f}")
    out = {"args": vars(args), "machine": platform.platform(), "python": platform.python_version(),
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "results": results}
    (REPO / "bench" / "results" / "gateway.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
