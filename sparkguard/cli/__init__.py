"""The ``sparkguard`` command: its entry point (``main``), one module per subcommand (``commands/``), and
what only a terminal needs (the console, fleet advice, ``init``'s pin). Nothing here is imported by the
engine, the run or the roles: the command line is one way in, beside plain pyinfra (``deploy/``)."""
