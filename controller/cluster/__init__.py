"""The controller's side of a cluster (docs/cluster.md): ``Coordination`` (one controller alone) and
``zk.ControllerCluster`` (several, through ZooKeeper); ``balancer`` and ``buckets`` are its pure rules."""

from .coordination import COMMITS, WORKFLOW, Coordination, LeaseBusy, stream_lease_name

__all__ = ["COMMITS", "WORKFLOW", "Coordination", "LeaseBusy", "stream_lease_name"]
