"""MCP over Streamable HTTP at ``/mcp``: the same use cases as ``/v1``, as MCP tools.

- :mod:`api.mcp.tools`: the tool set (flat parameters, output schemas,
  identity never taken from arguments).
- :mod:`api.mcp.door`: the ASGI door in front of the SDK's app: it admits the
  caller (``x-service-key`` or ``Authorization: Bearer``) before any MCP
  processing and runs the SDK's session manager.
- :mod:`api.mcp.push`: the caller's inbox as a resource, and the 2026-07-28
  listen stream told when a delivery commits; foreign inbox URIs refused.
- :mod:`api.mcp.session_stream`: the same push for handshake-era hosts, on a
  session stream with a session id no head stores.
"""
