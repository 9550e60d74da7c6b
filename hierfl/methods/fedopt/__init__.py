"""fedopt: the server optimizers of Reddi et al. 2021 and Hsu et al. 2019 (:mod:`.math`: their rules;
:mod:`.config`: the registered ``server_optimizer`` configs)."""

from hierfl.methods.fedopt import config as config  # noqa: F401  (registers the server optimizers)
