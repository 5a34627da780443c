"""The monitor's pure core: who has gone quiet, the bounded metrics history, the cluster's samples.

Nothing here reads the machine, the bus or the clock: times come in as numbers, so every
threshold is tested on a fake clock.
"""
