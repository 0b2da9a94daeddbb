"""``sparkguard audit``: what a node has, compared with what apply would give it, read-only. ``checks``
is what a role needs to audit itself (one check, the probe's output, shared judgements); ``run`` probes
each host in one SSH command and judges every role's state with them."""
