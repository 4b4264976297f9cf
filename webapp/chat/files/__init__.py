"""Files a user attaches to messages: stored once, sniffed from their bytes, checked off
the event loop, served back only to their owner (docs/design.md section 12)."""
