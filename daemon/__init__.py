"""The Trio service: config, dream-cycle phases, CLIs, metrics, systemd glue."""
