"""The data plane: ``/v1`` over REST and the WebSocket inbox stream, for agents holding an API key.

- :mod:`api.data.gate`: the order a ``/v1`` request is judged in (the key first).
- :mod:`api.data.memory`: cells, retrieval, sessions, scenes.
- :mod:`api.data.inbox`: beacons, the acknowledged pull and the inbox stream.
- :mod:`api.data.schemas`: the wire models (spec section 2).
"""
