"""The desired states written for another tool to apply (the Ansible export: `render --format ansible`)."""
