"""FedCH: balanced clusters by capacity, synchronous inside a cluster, asynchronous at the cloud.

Z. Wang, H. Xu, J. Liu, Y. Xu, H. Huang, Y. Zhao, "Accelerating Federated Learning with Cluster
Construction and Hierarchical Aggregation", IEEE TMC 22(7):3805–3822, 2023 (DOI
10.1109/TMC.2022.3147792); conference precursor INFOCOM 2021 (CFL/DCFL). docs/explanation/algorithms.md §2:

* construction (§2.3, :mod:`hierfl.methods.fedch.math`): K balanced clusters by a Hungarian
  device-by-slot assignment with leader (medoid) updates; leaders are devices, or the edge
  servers when the topology has them (then a balanced device → edge assignment);
  ``K: auto`` = K* of §2.4;
* a cluster round (§2.5): the leader holds the global model ``w`` it last received (version
  ``t_k``), sends it to its members, each member (the leader too [D]) runs ``H`` local steps and
  sends its model back; the leader waits under the scenario's ``straggler:`` policy (a
  :class:`~hierfl.protocols.straggler.Barrier` per round; ``wait_all`` = the paper's "all
  ``n_k`` models") and FedCH's own ``sync_timeout`` [D], averages what arrived by sample count and
  uploads the cluster model to the cloud;
* the cloud applies each cluster model when it arrives (FIFO, ties → lower cluster id):
  ``τ = t − t_k``, ``α_τ = α`` if ``τ ≤ a`` else ``α·τ^(−b)``, ``w ← (1 − α_τ)w + α_τ w_k``,
  ``t += 1``, and sends ``(w, t)`` back to that cluster's leader, which starts its next round;
* re-clustering (DCFL, :mod:`hierfl.core.recluster`): ``never``, ``periodic``, ``adaptive``; at
  re-clustering time the devices' current speeds and links are measured, the old clusters' open
  rounds are withdrawn (devices stop training) and their later uploads discarded [D], and every
  new cluster starts from the current ``w`` with ``t_k = t`` [D];
* churn: a member that drops out is no longer waited for; a device leader found offline stalls
  its cluster until it is back (§2.5: "a dead leader cannot raise s_k") or, with
  ``on_leader_lost: recluster``, makes the cloud re-cluster at once (reason ``leader_lost``).

Device-leader clusters talk over device-to-device links (``World.d2d_s``) and the leader over its
own access link to the cloud; edge-leader clusters use the device ↔ edge and edge ↔ cloud links.

The package, one concept per module:

* :mod:`~hierfl.methods.fedch.math` — the construction math, K* and the staleness function (pure);
* :mod:`~hierfl.methods.fedch.policies` — the staleness function and grouping as plug-ins of the shared kinds;
* :mod:`~hierfl.methods.fedch.config` — :class:`FedCHConfig` (``protocol: {name: fedch, …}``);
* :mod:`~hierfl.methods.fedch.protocol` — :class:`FedCH`: cluster rounds and the cloud;
* :mod:`~hierfl.methods.fedch.protocol_state` — :class:`FedCHState`, the clusters and models in flight;
* :mod:`~hierfl.methods.fedch.protocol_messages` — the typed payloads of FedCH's events;
* :mod:`~hierfl.methods.fedch.protocol_construction` — :class:`ClusterBuilder`: measurements, K, clusters;
* :mod:`~hierfl.methods.fedch.protocol_churn` — :class:`Reclustering`: teardown, rebuild, lost leaders.
"""

from hierfl.methods.fedch import policies as policies  # noqa: F401  (registers the staleness function and grouping)
from hierfl.methods.fedch.protocol_churn import Reclustering
from hierfl.methods.fedch.config import FedCHConfig, KStarConfig
from hierfl.methods.fedch.protocol_construction import ClusterBuilder
from hierfl.methods.fedch.protocol import FedCH
from hierfl.methods.fedch.protocol_state import FedCHState

__all__ = ["FedCHConfig", "KStarConfig", "FedCH", "FedCHState", "ClusterBuilder", "Reclustering"]
