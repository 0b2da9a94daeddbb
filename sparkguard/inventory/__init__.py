"""What the operator wrote, read and validated on the operator's machine before any SSH: the YAML
inventory (``loader``), Ansible's inventory forms (``ansible_compat``), which hosts a run touches
(``selection``), and the files and secrets an inventory names (``operator_files``, ``secrets``)."""
