"""One session (connection pool, transactions, the retry policy, the circuit breaker) and one ``TableQueue`` per
table: lock, delete, sort out, dead-letter, insert and move rows.

May import: common, wire, dialects.
"""
