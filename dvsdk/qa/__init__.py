"""Trust at scale: accuracy analysis, dataset evaluation, record and replay, and the pytest
plugin for users' own hardware-in-the-loop tests."""
