"""The error queue as one object (``ErrorQueue``): list and group failed messages, page them, retry (selected, by group, batched with a rate), delete; where a retry may write (one return policy).

May import: common, wire, dialects, tables, processing, operations.
"""
