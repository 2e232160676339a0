"""Leaves every floor uses: the exception family, checks of user-given numbers, secret redaction, text made
printable, blocking work awaited from an event loop (``threads``).

May import: nothing of the core.
"""
