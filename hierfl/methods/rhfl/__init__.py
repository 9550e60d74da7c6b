"""rhfl: its protocol (:mod:`.protocol`), its math (:mod:`.math`: client-confidence re-weighting, the loss
spec), its device job's runner (:mod:`.job`) and the training with the symmetric cross-entropy
(:mod:`.trainer`)."""

from hierfl.methods.rhfl import job as job  # noqa: F401  (registers the runner)
from hierfl.methods.rhfl import protocol as protocol  # noqa: F401  (registers the protocol)
