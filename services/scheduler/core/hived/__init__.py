"""HiveD: cells, virtual clusters, gang placement with priorities and preemption.

What the rest of the scheduler uses is named here. `HivedPolicy` (policy.py) is the service's
placement policy; `HivedAlgorithm` (algorithm.py) is HiveD's own pod-by-pod scheduler, which the
trace replayer drives; their requests and answers are groups.py's types. Beneath them: the cell
model (cells.py, priorities.py), its state and free lists (state.py, groups_state.py,
allocation.py, topology.py), the config (config.py, or defaults.py from the node list) and GPU
shares inside cells (shares.py).
"""

from services.scheduler.core.hived.algorithm import HivedAlgorithm
from services.scheduler.core.hived.config import HivedConfigError, parse_config
from services.scheduler.core.hived.defaults import DEFAULT_VC, config_from_nodes, leaf_type_of
from services.scheduler.core.hived.groups import BindInfo, HivedUserError, PodSpec, ScheduleResult
from services.scheduler.core.hived.policy import HivedPolicy

__all__ = [
    "DEFAULT_VC",
    "BindInfo",
    "HivedAlgorithm",
    "HivedConfigError",
    "HivedPolicy",
    "HivedUserError",
    "PodSpec",
    "ScheduleResult",
    "config_from_nodes",
    "leaf_type_of",
    "parse_config",
]
