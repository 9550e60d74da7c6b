"""personal: the personalised trainers (FedPer, LG-FedAvg, FedMeta, FedAvgMeta). Their math (:mod:`.math`: the
job method and the layer splits), their ``training.trainer`` configs (:mod:`.config`), their device job's
runners (:mod:`.job`) and the torch work of jobs and adapted evaluation (:mod:`.trainer`)."""

from hierfl.methods.personal import config as config  # noqa: F401  (registers the trainers)
from hierfl.methods.personal import job as job  # noqa: F401  (registers the runners)
