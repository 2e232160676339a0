"""What a transport does with queues, built on claims, sessions and tables: the handler pump, the drain, maintenance
and migration, publish/subscribe, partitioned drains, wake-ups.

May import: common, wire, dialects, tables, processing.
"""
