"""One run of a deploy against the nodes: what it remembers (context), what it read (snapshot), the lock that
fences each node (node_lock), the live diffs of a dry run (livediff), the runner that connects, locks, applies
and reports, and the rollout that runs it in batches over a fleet."""
