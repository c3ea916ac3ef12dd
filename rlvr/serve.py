"""``rlvr serve --model PATH``: an OpenAI-compatible endpoint on a checkpoint.

For evaluation and manual use (``rlvr.agents.gateway``).
Binds 127.0.0.1 by default (local clients only); ``--api-key`` makes every request send
``Authorization: Bearer <key>``. Any OpenAI client then talks to ``http://HOST:PORT/v1``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path


def _parser() -> argparse.ArgumentParser:
    from rlvr.agents.engine_registry import engine_names

    parser = argparse.ArgumentParser(
        prog="rlvr serve",
        description="Serve a checkpoint behind an OpenAI-compatible API (/v1/chat/completions, "
                    "/v1/completions, /v1/models).",
        epilog="Example: rlvr serve --model runs/tool_quickstart/export --port 8000",
    )
    add = parser.add_argument
    add("--model", required=True, metavar="PATH", help="HF checkpoint directory")
    add("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: local only)")
    add("--port", type=int, default=8000, help="TCP port (default 8000; 0 picks a free one)")
    add("--api-key", default=None, metavar="KEY",
        help="require 'Authorization: Bearer KEY' on every request")
    add("--model-name", default=None,
        help="the model id /v1/models lists (default: the directory's name)")
    add("--engine", choices=engine_names(), default="transformers", help="rollout engine")
    add("--device", default=None, help="device for the transformers engine (default cpu)")
    add("--sglang-url", default=None, metavar="URL",
        help="with --engine sglang: attach to this running server instead of launching one")
    add("--vllm-url", default=None, metavar="URL",
        help="with --engine vllm: attach to this running server instead of launching one")
    add("--max-batch-size", type=int, default=32, help="sequences decoded together (default 32)")
    return parser


def serve_main(argv: Sequence[str]) -> int:
    """``rlvr serve``: serve until interrupted; 2 on a bad argument or model path."""
    args = _parser().parse_args(list(argv))
    from rlvr.agents.errors import AgentError
    from rlvr.errors import RlvrError
    from rlvr.eval.evaluator import check_model_path

    try:
        path = check_model_path(args.model)
        if not 0 <= args.port < 65536:
            raise ValueError(f"--port must be in [0, 65535], got {args.port}")
        gateway_server = _build(path, args)
    except (RlvrError, AgentError, ValueError, OSError) as err:
        print(f"rlvr serve: error: {err}", file=sys.stderr)
        return 2
    print(f"rlvr serve: {path} as {gateway_server.gateway.model_name!r} on {gateway_server.url}"
          f"{' (API key required)' if args.api_key else ''}", flush=True)
    try:
        gateway_server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        gateway_server.gateway.engine.close()
    return 0


def _build(path: Path, args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    from rlvr.agents.engine_registry import EngineRequest, build_engine
    from rlvr.agents.gateway import Gateway
    from rlvr.agents.gateway.server import GatewayServer
    from rlvr.config.engine import EngineSection
    from rlvr.config.loader import from_dict

    # the engine section of rlvr train and rlvr eval: --sglang-url is the key sglang.url,
    # --vllm-url vllm.url
    section = from_dict(EngineSection, {"engine": args.engine, "sglang": {"url": args.sglang_url},
                                        "vllm": {"url": args.vllm_url}})
    tokenizer = AutoTokenizer.from_pretrained(str(path))
    engine = build_engine(EngineRequest(
        engine=section.engine, model_path=path, tokenizer=tokenizer, device=args.device,
        max_batch_size=args.max_batch_size, serve_model=True,
        options=section.engine_options)).engine
    gateway = Gateway(engine, tokenizer, model_name=args.model_name or path.name,
                      api_key=args.api_key, strict_model=True)
    return GatewayServer(gateway, host=args.host, port=args.port)
