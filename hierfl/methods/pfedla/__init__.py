"""pfedla: its protocol (:mod:`.protocol`), its layer-wise aggregation (:mod:`.math`), the per-client
hypernetworks in torch (:mod:`.trainer`) and its server tasks (:mod:`.server`, registered when a server task
is first looked up: :func:`hierfl.learn.server_tasks.discover`)."""

from hierfl.methods.pfedla import protocol as protocol  # noqa: F401  (registers the protocol)
