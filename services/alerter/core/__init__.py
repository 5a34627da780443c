"""The alerter's pure core: rule configuration, series, evaluation, grouping and payloads.

Nothing here touches the network, the event loop or the wall clock: time comes in as a number
of seconds (from a clock object in the service, a fake one in tests), so every decision can be
replayed exactly.
"""
