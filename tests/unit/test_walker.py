"""The walker's view of a layout (``actors.walker``): one directory per layout, so the actor handles it
looked up are kept from batch to batch, and a new layout gets a directory of its own; callers that
alternate between layouts (an online resize) reuse theirs, and the layouts kept are bounded."""

from __future__ import annotations

from typing import Any

from actors.propagation import PropagationConfig
from actors.walker import LAYOUTS_KEPT, Walker, WalkerConfig
from mesh.deployment import DirectorySpec


def test_a_layouts_directory_is_looked_up_once_and_a_new_layout_gets_its_own() -> None:
    made: list[DirectorySpec] = []

    def lookups(spec: DirectorySpec) -> Any:
        def lookup() -> object:
            made.append(spec)
            return object()  # stands in for a RayDirectory: what matters is how often one is made

        return lookup

    walker = Walker(WalkerConfig(PropagationConfig(owner_addressed=False)), lookups)
    first = DirectorySpec("t", 2, 2, 2, walkers=2)
    propagator = walker.propagator_for(first)
    assert propagator._directory() is propagator._directory() and made == [first]
    assert walker.propagator_for(first) is propagator
    resized = DirectorySpec("t", 4, 2, 2, walkers=2)
    other = walker.propagator_for(resized)
    assert other is not propagator and other._directory() is other._directory() and made == [first, resized]


async def test_callers_of_two_layouts_reuse_theirs_and_the_layouts_kept_are_bounded() -> None:
    made: list[DirectorySpec] = []

    def lookups(spec: DirectorySpec) -> Any:
        return lambda: made.append(spec) or object()

    walker = Walker(WalkerConfig(PropagationConfig(owner_addressed=False)), lookups)
    old, new = DirectorySpec("t", 2, 2, 2, walkers=2), DirectorySpec("t", 4, 2, 2, walkers=2, epoch=1)
    first = {spec: walker.propagator_for(spec) for spec in (old, new)}
    for _ in range(50):  # old and new shards' batches interleave while the resize runs
        for spec in (old, new):
            assert walker.propagator_for(spec) is first[spec]
    assert len(walker._propagators) == 2
    for epoch in range(2, 40):
        walker.propagator_for(DirectorySpec("t", 4, 2, 2, walkers=2, epoch=epoch))
    assert len(walker._propagators) == LAYOUTS_KEPT
    await walker.close()
