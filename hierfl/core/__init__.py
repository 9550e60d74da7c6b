"""Core of hierfl: the virtual clock, random streams and pure math.

Nothing in this package imports Ray, torch or does file I/O (a test checks it).
"""
