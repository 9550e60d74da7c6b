"""fedalign: its ``training.trainer`` config (:mod:`.config`) and its device job's runner (:mod:`.job`)."""

from hierfl.methods.fedalign import config as config  # noqa: F401  (registers the trainer)
from hierfl.methods.fedalign import job as job  # noqa: F401  (registers the runner)
