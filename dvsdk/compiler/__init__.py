"""Model -> DV700 compiler: frontends, graph IR, passes, lowering, net.bin writer."""
