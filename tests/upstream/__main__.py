"""`python -m tests.upstream`: the fake upstream standalone, for benchmarks."""

from __future__ import annotations

import argparse
import logging

from tests.upstream.fake import FakeUpstream
from tests.upstream.vocab import ENGINES, TOKENIZERS


def _parse_models(text: str) -> dict[str, int]:
    models = {}
    for item in text.split(","):
        name, _, window = item.partition("=")
        models[name.strip()] = int(window)
    return models


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.upstream", description="Serve a fake OpenAI-compatible API."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument(
        "--models",
        type=_parse_models,
        default=None,
        help="name=window,... (default: small=1024,medium=4096,large=16384,huge=131072)",
    )
    parser.add_argument("--chunk-delay", type=float, default=0.0, help="seconds between chunks")
    parser.add_argument(
        "--prefill", type=float, default=0.0, help="seconds per prompt token not cached"
    )
    parser.add_argument("--reply", default=None, help="answer every call with this text")
    parser.add_argument(
        "--engine", choices=ENGINES, default="openai", help="which real server to behave like"
    )
    parser.add_argument(
        "--tokenizer", choices=TOKENIZERS, default="cl100k", help="vocabulary that counts"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    server = FakeUpstream(
        models=args.models,
        host=args.host,
        port=args.port,
        engine=args.engine,
        tokenizer=args.tokenizer,
    )
    server.chunk_delay = args.chunk_delay
    server.set_prefill(args.prefill)
    server.set_reply(args.reply)
    server.serve_forever()


if __name__ == "__main__":
    main()
