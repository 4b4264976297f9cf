"""A self-hosted LLM chat whose conversations never outgrow the model that serves them."""
