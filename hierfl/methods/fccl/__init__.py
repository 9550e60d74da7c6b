"""fccl: its protocol (:mod:`.protocol`), its math (:mod:`.math`: the device jobs, their costs and targets),
its device job's runner (:mod:`.job`) and the jobs' torch work (:mod:`.trainer`)."""

from hierfl.methods.fccl import job as job  # noqa: F401  (registers the runner)
from hierfl.methods.fccl import protocol as protocol  # noqa: F401  (registers the protocol)
