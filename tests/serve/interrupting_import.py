"""A module whose top-level code raises KeyboardInterrupt (as a stray ``raise`` might)."""

raise KeyboardInterrupt
