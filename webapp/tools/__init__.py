"""Tools in the chat, through MCP servers the admin declares ([[mcp_servers]]).

`connections` holds one open session per server and runs calls with the server's
timeout; `outcomes` turns whatever a server answers (or fails to) into the text the model
is given, capped; `toolset` gathers a configuration's tools as the model is offered them.
Every fault is a value here, never an exception the chat must know about.
"""
