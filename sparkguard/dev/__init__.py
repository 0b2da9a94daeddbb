"""The developer's machinery shipped in the product: `sparkguard sandbox` (local systemd-nspawn nodes for the
README's quickstart) and the arm64 emulation it can use. Nothing here runs against a real node."""
