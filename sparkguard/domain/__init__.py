"""What sparkguard knows about the machines it guards, apart from any role or any tool that applies it."""
