"""Taking messages and settling them: the ``Claim`` of locked rows, the ``Outbox`` of sends, recoverability, one
receive strategy per transaction mode, the receive loop, the run summaries.

May import: common, wire, dialects, tables.
"""
