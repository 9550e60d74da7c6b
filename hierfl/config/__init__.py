"""The bottom of the config layers: the config base, errors, the plug-in registry and file lookup.

Nothing here imports the rest of hierfl; plug-ins (everywhere) and the scenario schema (at the
top, :mod:`hierfl.scenario`) build on it. The core never imports it.
"""
