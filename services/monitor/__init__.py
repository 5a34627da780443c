"""The monitor: node inventory, health and task metrics, service and node liveness, Prometheus."""
