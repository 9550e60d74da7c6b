"""fedalign: its ``training.trainer`` config (:mod:`.config`)."""

from hierfl.methods.fedalign import config as config  # noqa: F401  (registers the trainer)
