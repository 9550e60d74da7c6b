"""distrans: its math (:mod:`.math`: the offset job), its ``training.trainer`` config (:mod:`.config`), its
device job's runner (:mod:`.job`) and the torch training of the offset and the model (:mod:`.trainer`)."""

from hierfl.methods.distrans import config as config  # noqa: F401  (registers the trainer)
from hierfl.methods.distrans import job as job  # noqa: F401  (registers the runner)
