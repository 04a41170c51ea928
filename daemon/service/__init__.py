"""The running daemon's shell: the Trio loop with signals, systemd and logs."""
