"""`sparkguard render --format ansible`: the same desired states as one static Ansible play.

export (the files and the inventory) · play (the tasks per role) · secret_stand_ins (secrets as lookups,
never values). docs/ansible-export.md.
"""
