"""Browser tests: the chat UI in a real Chromium against the app served by uvicorn."""
