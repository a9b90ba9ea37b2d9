"""The Ray side of memesh: stateful actor classes, storage adapters, the
``Directory`` seam that finds them, and the :class:`~head.facade.Memesh`
facade the transports call.

The actor classes are plain classes; only ``actors.ray_directory`` turns them
into Ray actors, so everything else runs (and is unit-tested) in-process.
"""
