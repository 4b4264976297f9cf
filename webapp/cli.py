"""The `webapp` command: serve, migrate, check-config, user create, token create."""

from __future__ import annotations

import argparse
import sys

from webapp.accounts.cli import add_token_parser, add_user_parser
from webapp.llm.catalog import CatalogError, load_catalog
from webapp.settings import Settings


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn

    uvicorn.run(
        "webapp.asgi:app",
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        timeout_graceful_shutdown=5,
    )
    return 0


def cmd_migrate(args: argparse.Namespace) -> int:
    from webapp.migrate import upgrade

    settings = Settings()
    upgrade(settings.database_url)
    print(f"database is up to date: {settings.database_url}")
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

    for entry in configuration_dicts(catalog):
        print(
            f"  configuration {entry['name']!r}: served by {entry['serving_model']} "
            f"(window {entry['window']:,})"
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

    check = commands.add_parser("check-config", help="validate the TOML catalog")
    check.add_argument("file", nargs="?", help="TOML file (default: $WEBAPP_CONFIG)")
    check.set_defaults(run=cmd_check_config)

    add_user_parser(commands)
    add_token_parser(commands)
    return root


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
