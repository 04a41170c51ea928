"""sd_notify without libsystemd: readiness, status, watchdog pings, stopping."""

from __future__ import annotations

import os
import socket


def notify(message: str) -> bool:
    """Send one sd_notify message; False when not run under systemd (NOTIFY_SOCKET unset)."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]  # abstract namespace socket
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
        sock.connect(address)
        sock.sendall(message.encode("utf-8"))
    return True


def watchdog_interval_s() -> float | None:
    """Half the WatchdogSec systemd gave this process, or None when it set none."""
    usec = os.environ.get("WATCHDOG_USEC")
    pid = os.environ.get("WATCHDOG_PID")
    if not usec or (pid and pid.isdigit() and int(pid) != os.getpid()):
        return None
    return int(usec) / 2_000_000
