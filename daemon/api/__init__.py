"""The daemon's local API: operations, their models, and the HTTP transport."""
