"""The monitor's connections to the world: GPU probes (NVML, nvidia-smi), the machine's processes
and resources (/proc through psutil), and the Prometheus endpoint it serves."""
