"""feddc: its math (:mod:`.math`: the drift job and the server rule), its ``training.trainer`` config
(:mod:`.config`), its device job's runner (:mod:`.job`) and its math on the training device (:mod:`.trainer`)."""

from hierfl.methods.feddc import config as config  # noqa: F401  (registers the trainer)
from hierfl.methods.feddc import job as job  # noqa: F401  (registers the runner)
