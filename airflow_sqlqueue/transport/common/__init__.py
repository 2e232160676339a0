"""Leaves every floor uses: the exception family, checks of user-given numbers, secret redaction, text made
printable.

May import: nothing of the core.
"""
