"""The error queue as one object (``ErrorQueue``): count, group and page failed messages; retry them (selected,
whole queue with a selection, batched with a rate), edit and retry, delete. Where a retry may write is one rule,
``ReturnPolicy``; every retry moves a row with ``TableQueue.move``.

May import: common, wire, dialects, tables, processing, operations.
"""
