"""The wire format and message model, byte for byte as NServiceBus writes it: queue addresses, header JSON, the
standard and failure headers, native Ids, outgoing and received messages, their JSON payload form.

May import: common.
"""
