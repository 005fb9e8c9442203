"""Model formats into the graph IR (:mod:`dvsdk.compiler.ir`), one module per format."""
