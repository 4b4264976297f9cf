"""[[mcp_servers]] and a configuration's tools: what a valid file becomes, and that each
mistake is named with its file, entry and field (the catalog's rule, tests/test_catalog.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.test_catalog import BASE, assert_reported, errors_for, write
from webapp.llm.catalog import load_catalog

SERVERS = """
[[mcp_servers]]
name = "time"
transport = "stdio"
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
env_from = { TZ = "APP_TZ" }
tools = ["get_current_time"]

[[mcp_servers]]
name = "search"
transport = "http"
url = "http://127.0.0.1:9100/mcp/"
headers_from = { Authorization = "SEARCH_AUTH" }
approval = "always"
timeout = 5
max_result_tokens = 500
"""


def test_servers_and_a_configurations_tools_parse(tmp_path: Path) -> None:
    text = BASE + SERVERS + '\n[[configurations]]\nname = "tooled"\nmodel = "small"\n'
    text += 'tools = ["time", "search"]\nmax_tool_steps = 3\nkeep_tool_results = 0\n'
    catalog = load_catalog(write(tmp_path, text))
    time, search = catalog.mcp_servers["time"], catalog.mcp_servers["search"]
    assert (time.command, time.args, dict(time.env_from)) == (
        "mcp-server-time",
        ("--local-timezone", "UTC"),
        {"TZ": "APP_TZ"},
    )
    assert (time.tools, time.approval, time.timeout, time.max_result_tokens) == (
        ("get_current_time",),
        "never",
        30.0,
        4000,
    )
    assert (search.url, search.approval, search.timeout, search.tools) == (
        "http://127.0.0.1:9100/mcp",
        "always",
        5.0,
        None,
    )
    tooled, plain = catalog.configurations["tooled"], catalog.configurations["default"]
    assert (tooled.tools, tooled.max_tool_steps, tooled.keep_tool_results) == (
        ("time", "search"),
        3,
        0,
    )
    assert (plain.tools, plain.max_tool_steps, plain.keep_tool_results) == ((), 8, 2)


MISTAKES = [
    ('transport = "stdio"', "mcp_servers[0] 'x'", "command", "required for a 'stdio' server"),
    ('transport = "http"', "mcp_servers[0] 'x'", "url", "required for an 'http' server"),
    (
        'transport = "stdio"\ncommand = "x"\nurl = "http://h/"',
        "mcp_servers[0] 'x'",
        "url",
        "belongs to an 'http' server, not this 'stdio' one",
    ),
    (
        'transport = "http"\nurl = "http://h/"\nenv_from = { A = "B" }',
        "mcp_servers[0] 'x'",
        "env_from",
        "belongs to a 'stdio' server",
    ),
    ('transport = "ws"', "mcp_servers[0] 'x'", "transport", "expected 'stdio' or 'http'"),
    (
        'transport = "stdio"\ncommand = "x"\nenv_from = { TOKEN = "sk-secret value" }',
        "mcp_servers[0] 'x'",
        "env_from.TOKEN",
        "is not an environment variable name",
    ),
    (
        'transport = "stdio"\ncommand = "x"\napproval = "sometimes"',
        "mcp_servers[0] 'x'",
        "approval",
        "expected 'never' or 'always'",
    ),
    (
        'transport = "stdio"\ncommand = "x"\ntimeout = 0',
        "mcp_servers[0] 'x'",
        "timeout",
        "must be greater than 0",
    ),
    (
        'transport = "stdio"\ncommand = "x"\nmax_result_tokens = -1',
        "mcp_servers[0] 'x'",
        "max_result_tokens",
        "must be greater than 0",
    ),
    (
        'transport = "stdio"\ncommand = "x"\ncwd = "/"',
        "mcp_servers[0] 'x'",
        "cwd",
        "unknown key",
    ),
]


@pytest.mark.parametrize(("body", "entry", "field", "fragment"), MISTAKES)
def test_a_bad_server_is_named(
    tmp_path: Path, body: str, entry: str, field: str, fragment: str
) -> None:
    path, errors = errors_for(tmp_path, BASE + f'\n[[mcp_servers]]\nname = "x"\n{body}\n')
    assert_reported(errors, f"{path}: {entry}: field '{field}': ", fragment)


@pytest.mark.parametrize(
    ("setting", "fragment"),
    [
        ('tools = ["tiem"]', "unknown mcp_server 'tiem' (did you mean 'time'?)"),
        ('tools = ["time", "time"]', "server 'time' is listed twice"),
    ],
)
def test_a_configuration_names_declared_servers_once(
    tmp_path: Path, setting: str, fragment: str
) -> None:
    text = BASE + SERVERS + f'\n[[configurations]]\nname = "c"\nmodel = "small"\n{setting}\n'
    path, errors = errors_for(tmp_path, text)
    assert_reported(errors, f"{path}: configurations[1] 'c': field 'tools': ", fragment)


def test_step_limit_and_kept_results_are_checked(tmp_path: Path) -> None:
    text = BASE + '\n[[configurations]]\nname = "c"\nmodel = "small"\n'
    path, errors = errors_for(tmp_path, text + "max_tool_steps = 0\nkeep_tool_results = -1\n")
    prefix = f"{path}: configurations[1] 'c': field "
    assert_reported(errors, prefix + "'max_tool_steps': ", "must be greater than 0")
    assert_reported(errors, prefix + "'keep_tool_results': ", "must be at least 0")
