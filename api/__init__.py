"""The head node's transports, over the facade (:class:`head.facade.Memesh`) and nothing else.

- :mod:`api.data`: the data plane (``/v1`` REST and the inbox stream).
- :mod:`api.console`: the operator console (``/admin``, the observatory
  stream, the gRPC AdminService).
- Shared: :mod:`api.app` (the application), :mod:`api.deps` (the FastAPI
  dependencies of every router), :mod:`api.admission` (authenticate and
  charge, per transport shape), :mod:`api.websocket` (stream refusals, error
  frames, close codes), :mod:`api.errors` (the one error-to-status table),
  :mod:`api.gate_common` (the gates' body, origin and timeout checks),
  :mod:`api.cursors`, :mod:`api.openapi`, :mod:`api.metrics`.
"""
