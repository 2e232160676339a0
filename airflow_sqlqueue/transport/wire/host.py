"""Who this process is, as NServiceBus names a host: machine name, a stable host id, a display name.

ServiceControl groups failed messages and endpoints by host: ``$.diagnostics.hostid`` must be a GUID (it is
parsed as one) and stay the same across restarts on one machine, as core's default host id does.
"""

from __future__ import annotations

import os
import socket
import sys
import uuid
from functools import cache

#: Namespace of the host ids this provider derives (a fixed, random UUID).
HOST_ID_NAMESPACE = uuid.UUID("2b8f0c51-6d0e-4b7e-a1f4-3c9d7e5a8b20")


@cache
def machine_name() -> str:
    """The machine name (``NServiceBus.ProcessingMachine``, ``NServiceBus.OriginatingMachine``)."""
    return os.environ.get("SQLQUEUE_MACHINE_NAME") or socket.gethostname() or "localhost"


@cache
def host_id() -> str:
    """A GUID in "N" format (32 hex digits) derived from the machine name and the Python installation, so it
    stays the same across restarts of the same deployment (core derives its default from machine and path)."""
    return uuid.uuid5(HOST_ID_NAMESPACE, f"{machine_name()}|{sys.prefix}").hex


def host_display_name() -> str:
    """``$.diagnostics.hostdisplayname``: the machine name."""
    return machine_name()
