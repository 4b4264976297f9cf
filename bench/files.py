"""`make bench-files`: a 20-page PDF and a 12-megapixel photo, each uploaded, counted and
sent, timed, with the peak memory of the app's process and of a reader's work on each.

A warm in-process app on a SQLite file, the fake upstream in a process of its own with a
model that sees. Each file is uploaded (`POST /api/files`: sniffed, read in a reader
process, stored), then sent in a message of its own in a new conversation (`POST
.../messages`, waiting for the answer: counted by the serving model's rule, bounded, the
picture scaled to the provider's maximum and sent as a data URL). Three times each; the
first upload of each starts the readers and stores the bytes, the later ones find the
same bytes stored.

    python -m bench.files
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from io import BytesIO
from pathlib import Path

from litestar.testing import AsyncTestClient
from PIL import Image

from bench.common import fresh_sqlite, machine, run, summary
from bench.processes import upstream
from tests.catalogs import write_upstream_catalog
from tests.factories import bearer_header, make_user
from tests.factories.files import pdf
from webapp.app import create_app
from webapp.settings import Settings

SEEING = """
[[models]]
name = "seer"
provider = "up"
model_id = "large"
context_window = 128000
max_output_tokens = 1000
capabilities = ["chat", "vision"]

[[configurations]]
name = "seeing"
model = "seer"
"""
REPEATS = 3


class At:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url


def photo() -> bytes:
    """12 megapixels (4000 x 3000) of noise over a gradient: as hard to compress as a
    photograph, a JPEG of some megabytes."""
    noise = Image.effect_noise((4000, 3000), 40).convert("RGB")
    ramp = Image.linear_gradient("L").resize((4000, 3000)).convert("RGB")
    out = BytesIO()
    Image.blend(noise, ramp, 0.5).save(out, format="JPEG", quality=90)
    return out.getvalue()


def document() -> bytes:
    """20 pages of about 120 words each."""
    return pdf([f"Page {n}: " + " ".join(f"word{i}" for i in range(120)) for n in range(20)])


def peak_mib(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


READ_ALONE = """
import sys
from pathlib import Path
from webapp.chat.files.inspect import FileLimits, as_sent, inspect
from webapp.chat.files.sniff import sniff
name, path = sys.argv[1], Path(sys.argv[2])
data = path.read_bytes()
kept = inspect(name, data, sniff(name, data), FileLimits(50_000_000, 2_000, 10**7))
if kept.width:
    as_sent(kept.data, kept.media_type, 2048)
status = Path("/proc/self/status").read_text()
print(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM")))
"""
"""What a reader's child does with one file (read it, and for a picture scale it for
sending), alone in an interpreter of its own: its peak resident memory (`VmHWM`, which
starts afresh with the new program, where `getrusage` would count the parent's)."""


def reader_peak_mib(folder: Path, name: str, data: bytes) -> float:
    path = folder / name
    path.write_bytes(data)
    done = subprocess.run(
        [sys.executable, "-c", READ_ALONE, name, str(path)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.split()[-1]) / 1024


async def measure(folder: Path, port: int) -> None:
    settings = Settings(
        database_url=fresh_sqlite(folder / "files.db"),
        config=write_upstream_catalog(
            folder / "catalog.toml", At(f"http://127.0.0.1:{port}/v1"), SEEING
        ),
    )
    token = await make_user(settings.database_url, "reader")
    files = {"report.pdf": document(), "photo.jpg": photo()}
    async with AsyncTestClient(app=create_app(settings)) as client:
        client.headers.update(bearer_header(token))
        for name, data in files.items():
            uploads, sends = [], []
            for _ in range(REPEATS):
                start = time.perf_counter()
                sent = await client.post("/api/files", files={"file": (name, data)})
                uploads.append((time.perf_counter() - start) * 1000)
                assert sent.status_code == 201, sent.text
                made = await client.post("/api/conversations", json={"configuration": "seeing"})
                conversation = made.json()["id"]  # one send each: no earlier turn's files
                start = time.perf_counter()
                answered = await client.post(
                    f"/api/conversations/{conversation}/messages",
                    json={"content": "What is in it?", "files": [sent.json()["id"]]},
                )
                sends.append((time.perf_counter() - start) * 1000)
                assert answered.status_code == 201, answered.text
            counted = answered.json()["user"]["attachments"][0]["token_counts"]["seer"]
            print(
                f"{name}: {len(data) / 1024:,.0f} KiB, {counted:,} tokens for seer; "
                f"upload {summary(uploads)}; send {summary(sends)}; "
                f"a reader's peak for it {reader_peak_mib(folder, name, data):.0f} MiB"
            )
    print(
        f"peak RSS of the app's process: {peak_mib(resource.RUSAGE_SELF):.0f} MiB (the test "
        "client and the bench's own files included)"
    )


async def main() -> None:
    print(machine())
    with (
        tempfile.TemporaryDirectory() as name,
        upstream(Path(name), set(), 0.0, "A picture and a report.") as port,
    ):
        await measure(Path(name), port)


if __name__ == "__main__":
    run(main())
