"""A cycle-approximate DV700 behind the same register and DMA interface as the hardware."""
