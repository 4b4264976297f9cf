"""The ASGI entry point uvicorn imports in each worker: settings come from the environment."""

from webapp.app import create_app

app = create_app()
