"""The chat embedded in other sites through an iframe, for visitors without an account."""
