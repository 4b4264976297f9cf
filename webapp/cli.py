"""The `webapp` command: serve, migrate, check-config, user create, token create."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

from webapp.accounts.cli import add_token_parser, add_user_parser
from webapp.llm.catalog import Catalog, CatalogError, load_catalog
from webapp.settings import Settings


def cmd_serve(args: argparse.Namespace) -> int:
    """uvicorn, with what it would otherwise get wrong for us: it believes X-Forwarded-For
    from 127.0.0.1 by default (any local client could pick its address, and so dodge the
    sign-in throttle and the embed quotas); it never times out a slow request. Its HTTP
    parser is httptools where installed (see webapp.web.server)."""
    import uvicorn

    from webapp.web.server import Deadlines, http_protocol

    settings = Settings()
    proxies = settings.trusted_proxy_list
    uvicorn.run(
        "webapp.asgi:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        timeout_graceful_shutdown=5,
        proxy_headers=bool(proxies),
        forwarded_allow_ips=proxies or None,
        timeout_keep_alive=max(1, round(settings.keep_alive_timeout)),
        http=http_protocol(Deadlines(settings.request_timeout, settings.write_timeout)),
    )
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from webapp.migrate import head_revision, upgrade, upgrade_report

    settings = Settings()
    before = upgrade(settings.database_url)
    print(f"{upgrade_report(before, head_revision())}: {settings.database_url}")
    return 0


def cmd_check_config(args: argparse.Namespace) -> int:
    path = args.file or Settings().config
    try:
        catalog = load_catalog(path)
    except CatalogError as error:
        print(str(error), file=sys.stderr)
        return 1
    source = catalog.source or "built-in demo catalog (WEBAPP_CONFIG is not set)"
    print(f"{source}: OK")
    print(
        f"  {len(catalog.providers)} providers, {len(catalog.models)} models, "
        f"{len(catalog.configurations)} configurations, {len(catalog.embeds)} embeds"
    )
    from webapp.llm.describe import configuration_dicts

    catalog = _report_models(catalog)
    for entry in configuration_dicts(catalog):
        print(
            f"  configuration {entry['name']!r}: served by {entry['serving_model']} "
            f"(window {entry['window']:,}; a moved cut keeps {entry['trim_to']:.0%} of the budget)"
        )
    return _report_tools(catalog) if catalog.mcp_servers else 0


def _report_tools(catalog: Catalog) -> int:
    """Connect to each MCP server and size each configuration's tools; 1 when one leaves
    no room for a message."""
    import asyncio

    from webapp.tools.check import ToolReport, check_tools
    from webapp.tools.connections import connecting

    async def inspect() -> ToolReport:
        async with connecting() as connections:
            return await check_tools(catalog, connections)

    report = asyncio.run(inspect())
    print("\n".join(report.lines))
    if report.refused:
        names = ", ".join(map(repr, report.refused))
        print(f"{catalog.source}: tools leave no room in configuration {names}", file=sys.stderr)
    return 1 if report.refused else 0


def _report_models(catalog: Catalog) -> Catalog:
    """Print each model's window and tokenizer and where they came from; return the
    catalog with discovered windows, so configurations are described as they will run.

    Asks the servers as the app does at start (bounded: a few seconds at worst)."""
    import asyncio

    from webapp.llm.discovery import WindowSource, discover
    from webapp.llm.engine import UNREPORTED_CACHE
    from webapp.llm.tokenizers import Tokenizers

    async def inspect() -> tuple[Catalog, dict[str, WindowSource], dict[str, str]]:
        async with Tokenizers() as tokenizers:
            (found, sources), _ = await asyncio.gather(discover(catalog), tokenizers.probe(catalog))
            described = {name: tokenizers.describe(m) for name, m in catalog.models.items()}
        return found, sources, described

    # Discovery and the probe log what they find for the app's log; here the same facts
    # are printed below, so keep them from also reaching stderr through logging's
    # last-resort handler.
    import logging

    logging.getLogger("webapp.llm").addHandler(logging.NullHandler())
    found, sources, tokenizers = asyncio.run(inspect())
    learned, unreported = _stored_facts()
    for name, source in sources.items():
        print(f"  model {name!r}: window {source.window:,} ({source.source})")
        if learned.get(name, source.window) < source.window:
            print(
                f"    learned window {learned[name]:,} (the engine refused a longer prompt; "
                "sends are fitted to it)"
            )
        print(f"    tokenizer: {tokenizers[name]}")
        for note in source.notes:
            print(f"    warning: {note}")
        if name in unreported:
            print(f"    note: {UNREPORTED_CACHE}")
    return found


def _stored_facts() -> tuple[dict[str, int], set[str]]:
    """What the app's database knows of the models: the windows it learned from engines'
    refusals, and the models whose answers of the last days carried no prompt cache
    report; nothing when there is no database yet or it cannot be read (within a few
    seconds)."""
    import asyncio
    from pathlib import Path

    from sqlalchemy.engine import make_url
    from sqlmodel import Session

    from webapp.admin.queries import prompt_cache_per_model_day, unreported_models
    from webapp.admin.web import CHART_DAYS
    from webapp.db import Database
    from webapp.llm.calibration import learned_windows

    url = Settings().database_url
    database = make_url(url).database
    if make_url(url).get_backend_name() == "sqlite" and not (database and Path(database).exists()):
        return {}, set()

    def facts(session: Session) -> tuple[dict[str, int], set[str]]:
        days = prompt_cache_per_model_day(session, CHART_DAYS)
        return dict(learned_windows(session)), set(unreported_models(days))

    async def read() -> tuple[dict[str, int], set[str]]:
        db = Database(url)
        try:
            return await asyncio.wait_for(db.read(facts), 5)
        finally:
            await db.dispose()

    try:
        return asyncio.run(read())
    except Exception:  # check-config checks the file; the database is a bonus
        return {}, set()


def cmd_purge(args: argparse.Namespace) -> int:
    import asyncio

    from webapp.chat.jobs import chat_jobs
    from webapp.chat.stored.models import Conversation
    from webapp.db import Database
    from webapp.llm.calibration import Calibrator
    from webapp.llm.manager import LLMManager

    if args.days < 0:
        print("error: --days must be 0 or more", file=sys.stderr)
        return 2
    settings = Settings()

    async def run() -> list[Conversation]:
        db = Database(settings.database_url)
        manager = LLMManager(
            settings.catalog, Calibrator(), transport_kind=settings.provider_transport
        )
        try:
            chat = chat_jobs(db, manager, settings)
            return await chat.editor.purge_idle(args.days, dry_run=args.dry_run)
        finally:
            await db.dispose()

    idle = asyncio.run(run())
    verb = "would delete" if args.dry_run else "deleted"
    print(f"{verb} {len(idle)} conversations idle for more than {args.days:g} days")
    for conversation in idle:
        print(
            f"  {conversation.id}  {conversation.updated_at:%Y-%m-%d %H:%M}  "
            f"{conversation.owner}  {conversation.title}"
        )
    return 0


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="webapp", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="serve the web app with uvicorn")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(run=cmd_serve)

    migrate = commands.add_parser("migrate", help="apply database migrations")
    migrate.set_defaults(run=cmd_migrate)

    purge = commands.add_parser("purge", help="delete conversations idle for N days")
    purge.add_argument("--days", type=float, required=True, help="idle for more than this")
    purge.add_argument("--dry-run", action="store_true", help="list what would be deleted")
    purge.set_defaults(run=cmd_purge)

    check = commands.add_parser("check-config", help="validate the TOML catalog")
    check.add_argument("file", nargs="?", help="TOML file (default: $WEBAPP_CONFIG)")
    check.set_defaults(run=cmd_check_config)

    add_user_parser(commands)
    add_token_parser(commands)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    run: Callable[[argparse.Namespace], int] = args.run  # each command's set_defaults
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
