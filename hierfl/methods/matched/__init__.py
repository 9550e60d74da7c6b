"""matched: matched averaging of neurons (PFNM, FedMA): the protocols (:mod:`.protocol`: what both share;
:mod:`.protocol_pfnm`, :mod:`.protocol_fedma`), the matching (:mod:`.math`), the server work on flat MLP
vectors (:mod:`.trainer`) and the server tasks (:mod:`.server`, registered when a server task is first looked
up: :func:`hierfl.learn.server_tasks.discover`)."""

from hierfl.methods.matched import protocol_fedma as protocol_fedma  # noqa: F401  (registers the protocol)
from hierfl.methods.matched import protocol_pfnm as protocol_pfnm  # noqa: F401  (registers the protocol)
