"""Developer tooling: local servers, benchmarks, demo data."""
