"""Numbered SQL migrations, applied in order at start-up; additive only."""

from importlib import resources
from importlib.abc import Traversable


def migration_files() -> list[Traversable]:
    """Every `NNNN_name.sql` file of this package, in the order they must apply."""
    files = [f for f in resources.files(__name__).iterdir() if f.name.endswith(".sql")]
    return sorted(files, key=lambda f: f.name)
