"""Conversations: what is stored, how a send goes, and the routes that expose it."""
