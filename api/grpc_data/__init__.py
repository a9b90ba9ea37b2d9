"""The gRPC data plane, memesh.data.v1: the /v1 operations and the inbox stream over gRPC (docs/grpc.md).

``server`` builds the listener of its own (health, reflection), ``servicer``
the unary RPCs, ``stream`` the inbox stream, ``wire`` the messages (judged by
REST's request models), ``status`` the rich errors (``google.rpc.Status``).
"""
