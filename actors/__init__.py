"""What runs inside Ray actors: the actor classes, their storage, and the two directories.

The actor classes are plain classes answering the Protocols of
:mod:`mesh.seam` (checked by mypy through :mod:`actors.kinds`); only
:mod:`actors.ray_directory` turns them into Ray actors, and
:mod:`actors.directory` runs the same classes in-process for unit tests and
notebooks. Only :mod:`actors.storage` talks to LanceDB. Nothing here imports
the head (``head``) or a transport (``api``).
"""
