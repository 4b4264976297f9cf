"""The send's stages, in the order `chat.send` calls them: counting, admission, history, store."""
