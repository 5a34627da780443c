"""HiveD: cells, virtual clusters, gang placement with priorities and preemption."""
