"""The operator console: the control plane for operators, mounted only when the console is enabled.

- :mod:`api.console.mount`: what ``mount_admin`` adds to the app.
- :mod:`api.console.gate`: the order an ``/admin/api`` request is judged in
  (the console session first, then the role).
- :mod:`api.console.oidc` and :mod:`api.console.login`: the OIDC login state
  and its routes; :mod:`mesh.console_sessions`: sessions and logins under way.
- :mod:`api.console.operator_api` and :mod:`api.console.schemas`: the
  operator REST API and its wire models.
- :mod:`api.console.observatory`: the observatory snapshot and stream.
- :mod:`api.console.grpc_service`: the gRPC AdminService (API-key callers).
"""
