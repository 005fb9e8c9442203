"""The DV700 facts and their math: binary layouts (spec), FP16, the tensor layout,
weight packing, output sizes and tiles."""
