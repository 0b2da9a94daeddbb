"""From desired state to the node: what a role's DesiredState means as files (render), as one read-only probe of
the node (probe, filestate), and as pyinfra operations (converge, operations), with the per-host desired states
every command shares (desired) and the one error of a deploy refused before any operation (preflight)."""
