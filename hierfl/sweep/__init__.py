"""Sweeps: a grid of scenario variants × seeds run as Ray Tune trials, and their seed-aggregated results.

:mod:`hierfl.sweep.spec` reads the sweep file, :mod:`hierfl.sweep.run` runs it on Ray Tune (the
``tune`` extra, imported only there) and :mod:`hierfl.sweep.aggregate` draws and tabulates it.
"""
