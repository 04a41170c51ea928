"""The running daemon's shell: the Trio loop, the cycle's thread, systemd, health, metrics and logs."""
