"""`webapp check-config` connects to each MCP server, lists its tools and sizes their
schemas against each configuration's window (the real `mcp-server-time`, the fixture on
stdio; the demo provider needs no network)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.factories import run
from tests.mcp_servers import TIME_SERVER, stdio_fixture_toml

CATALOG = f"""
[[providers]]
name = "demo"
kind = "demo"

[[models]]
name = "roomy"
provider = "demo"
context_window = 32000

[[models]]
name = "snug"
provider = "demo"
context_window = 2048
max_output_tokens = 200

[[models]]
name = "tiny"
provider = "demo"
context_window = 900
max_output_tokens = 100

[[mcp_servers]]
name = "time"
transport = "stdio"
command = "{TIME_SERVER}"

{stdio_fixture_toml("fixture")}
[[mcp_servers]]
name = "broken"
transport = "stdio"
command = "/nonexistent/server"
timeout = 5

[[configurations]]
name = "roomy"
model = "roomy"
tools = ["time", "broken"]

[[configurations]]
name = "snug"
model = "snug"
tools = ["time", "fixture"]

[[configurations]]
name = "plain"
model = "tiny"
"""


def test_servers_are_listed_and_schemas_sized(tmp_path: Path) -> None:
    path = tmp_path / "tools.toml"
    path.write_text(CATALOG, encoding="utf-8")
    result = run("check-config", str(path))
    out = result.stdout
    assert result.returncode == 0, result.stderr + out
    assert f"mcp server 'time' (stdio, {TIME_SERVER}): tools get_current_time, convert_time" in out
    assert "mcp server 'fixture'" in out and "tools echo, flood, hang" in out
    assert "mcp server 'broken' (stdio, /nonexistent/server): tools none" in out
    assert "warning: " in out.split("mcp server 'broken'")[1].split("\n")[1]
    roomy = out.split("configuration 'roomy': 2 tools, schemas ")[1].split("\n")[:2]
    share = re.fullmatch(r"[\d,]+ tokens \((\d+)% of the window of 32,000\)", roomy[0])
    assert share and int(share.group(1)) < 25 and "warning" not in roomy[1]
    snug = out.split("configuration 'snug': 12 tools, schemas ")[1].split("\n\n")[0]
    assert "of the window of 2,048)" in snug and "warning: past a quarter" in snug
    assert "configuration 'plain': " not in out.split("mcp server")[-1]


def test_schemas_that_leave_no_room_fail_the_check(tmp_path: Path) -> None:
    path = tmp_path / "tight.toml"
    path.write_text(CATALOG.replace('model = "snug"', 'model = "tiny"'), encoding="utf-8")
    result = run("check-config", str(path))
    assert result.returncode == 1
    assert "error: the tools' schemas and the system prompt take more than" in result.stdout
    assert f"{path}: tools leave no room in configuration 'snug'" in result.stderr
