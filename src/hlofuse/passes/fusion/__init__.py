"""Fusion passes: XLA's four strategies (instruction fusion, fusion merger, multi-output,
horizontal) and their rules. `hlofuse.passes.fusion.registered` imports every fusion pass
module so that it registers with `hlofuse.passes.registry` (the registry loads it on first
lookup); importing a single submodule stays cheap.
"""
