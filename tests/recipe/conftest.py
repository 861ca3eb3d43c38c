"""Fixtures of every test under tests/recipe: ``entry``, the entry point in this process (``helpers.py``)."""

from tests.recipe.helpers import entry  # noqa: F401 (a fixture)
