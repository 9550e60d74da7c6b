"""fedalign: its math (:mod:`.math`: the job method, its knobs and the cost of its slim pass), its
``training.trainer`` config (:mod:`.config`), its device job's runner (:mod:`.job`) and its local loss
in torch (:mod:`.trainer`)."""

from hierfl.methods.fedalign import config as config  # noqa: F401  (registers the trainer)
from hierfl.methods.fedalign import job as job  # noqa: F401  (registers the runner)
