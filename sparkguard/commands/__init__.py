"""One module per ``sparkguard`` subcommand."""
