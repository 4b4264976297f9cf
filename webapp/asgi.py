"""The ASGI entry point uvicorn imports in each worker: settings come from the environment.

Once the app has started, the process's collector is set for serving (`webapp.web.heap`).
"""

from webapp.app import create_app
from webapp.web import heap

app = create_app()
app.on_startup.append(heap.settle)
