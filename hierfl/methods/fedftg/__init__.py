"""fedftg: its protocols (:mod:`.protocol`: FedAvg rounds with a fine-tuned average; :mod:`.protocol_hier`:
the same on HierFAVG's hierarchy), its server-side arithmetic (:mod:`.math`), the generator and the
fine-tuning in torch (:mod:`.trainer`) and its server task (:mod:`.server`, registered when a server task is
first looked up: :func:`hierfl.learn.server_tasks.discover`)."""

from hierfl.methods.fedftg import protocol as protocol  # noqa: F401  (registers the protocol)
from hierfl.methods.fedftg import protocol_hier as protocol_hier  # noqa: F401  (registers the protocol)
