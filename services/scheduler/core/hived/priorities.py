"""The priorities HiveD orders cells and groups by, in one module that cells and groups both read.

A cell's priority is that of the highest group using it (FREE when none does); opportunistic
groups take only what no guaranteed group needs, and guaranteed ones range from MIN to MAX.
"""

FREE_PRIORITY = -2
OPPORTUNISTIC_PRIORITY = -1
MIN_GUARANTEED_PRIORITY = 0
MAX_GUARANTEED_PRIORITY = 1000
