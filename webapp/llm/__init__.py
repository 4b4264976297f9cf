"""The LLM layer: what a model is, how big a prompt is, and how a send reaches a model."""
