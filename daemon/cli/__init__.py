"""Command-line front ends, one module per verb."""
