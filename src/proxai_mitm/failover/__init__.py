"""Fallbacks: the loopback attempt server that tries a route's upstreams in order, its HTTP client and the plan of one failover flow."""
