"""memesh domain core: cells, scenes, layers, identities, ranking and errors.

Pure Python and numpy. Nothing here imports Ray, a web framework, a storage
driver or the settings, and nothing reads a clock or a random source except
through parameters; every transition can be replayed in a unit test.
"""
