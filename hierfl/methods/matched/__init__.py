"""matched: matched averaging of neurons (PFNM, FedMA): the matching (:mod:`.math`), the server work on
flat MLP vectors (:mod:`.trainer`) and the server tasks (:mod:`.server`, registered when a server task is
first looked up: :func:`hierfl.learn.server_tasks.discover`)."""
