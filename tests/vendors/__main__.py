"""`python -m tests.vendors`: the fake vendors standalone, for benchmarks and trying a
catalog by hand."""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Sequence

from tests.upstream import TOKENIZERS
from tests.vendors.fake import FakeVendors
from tests.vendors.rules import ANTHROPIC_KEY, GEMINI_KEY


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m tests.vendors", description="Serve fake Anthropic and Gemini APIs."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--tokenizer", choices=TOKENIZERS, default="qwen")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    server = FakeVendors(args.host, args.port, args.tokenizer).start()
    print(
        f"fake vendors serving {server.base_url} (keys {ANTHROPIC_KEY}, {GEMINI_KEY})", flush=True
    )
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.stop()


if __name__ == "__main__":
    main()
