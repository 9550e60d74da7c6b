"""personal: its ``training.trainer`` config (:mod:`.config`)."""

from hierfl.methods.personal import config as config  # noqa: F401  (registers the trainer)
