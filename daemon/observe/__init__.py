"""What the daemon tells about itself: Prometheus metrics, the health its probes and the
watchdog read, the zeitgeist backend's and the storage's health, the backend's first probe."""
