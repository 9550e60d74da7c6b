"""fedftg: its server-side arithmetic (:mod:`.math`), the generator and the fine-tuning in torch
(:mod:`.trainer`) and its server task (:mod:`.server`, registered when a server task is first looked up:
:func:`hierfl.learn.server_tasks.discover`)."""
