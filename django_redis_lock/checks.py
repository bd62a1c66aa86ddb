"""System checks (filled in by the core work)."""
