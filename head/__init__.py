"""The head's use cases: what a request does, between a transport (``api``) and the actors.

:class:`head.facade.Memesh` is the one object transports hold: it admits a
caller (``admit``: authenticate and charge a rate bucket) and exposes the
services (memory, inbox, identity, data lifecycle, descriptors, reembed, the
observatory hub). The head embeds text (:mod:`head.embedding`) and reaches
actors only through the typed seam of :mod:`mesh.seam`; it never imports an
actor module (``tests/unit/test_architecture.py``).
"""
