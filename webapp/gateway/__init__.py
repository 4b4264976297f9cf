"""An OpenAI-compatible gateway under /v1 (docs/design.md section 9).

Scripts, IDE assistants and agent frameworks speak the OpenAI API; here they reach the
same send pipeline as the chat pages, so every chat call they make is fitted to the
window of the model that serves it, and the answer says what was left out.
"""

from webapp.gateway.routes import gateway_router

__all__ = ["gateway_router"]
