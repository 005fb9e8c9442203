"""``dvsdk.firmware_spec``: the DV700 described as data (YAML, read by :mod:`dvsdk.hw.spec`
and :mod:`dvsdk.link.protocol`, and the Markdown that explains it).

A regular package, not a namespace one, so that ``importlib.resources.files`` reads its
files from any install: a directory, an editable install or a zip.  No code.
"""
