"""Routing generation over inference replicas by prefix-cache residency and token load.

`Router` (an `Engine` over N replicas), `RoutingCore` (decisions + bookkeeping, shared with the
cluster simulator in `sim/`), the policies, and the router-side `PrefixTree`.
"""
