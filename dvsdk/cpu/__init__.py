"""numpy kernels for the ops the DV700 does not run (and for constant folding)."""
