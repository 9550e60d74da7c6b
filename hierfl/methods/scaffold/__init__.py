"""scaffold: its math (:mod:`.math`: the job method, the gradient correction and the control step), its
``training.trainer`` config (:mod:`.config`), its device job's runner (:mod:`.job`) and its math on the training
device (:mod:`.trainer`)."""

from hierfl.methods.scaffold import config as config  # noqa: F401  (registers the trainer)
from hierfl.methods.scaffold import job as job  # noqa: F401  (registers the runner)
