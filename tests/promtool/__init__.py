"""promtool scenarios for the alert rules (see tests/unit/test_alert_rules.py)."""
