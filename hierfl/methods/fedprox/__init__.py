"""fedprox: its ``training.trainer`` config (:mod:`.config`)."""

from hierfl.methods.fedprox import config as config  # noqa: F401  (registers the trainer)
