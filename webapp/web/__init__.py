"""What every page shares: templates, markdown rendering, security headers."""
