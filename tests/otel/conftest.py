"""The CLI tests' ``project`` fixture: a store in a temporary directory, ways to run ``wf``."""

from tests.cli.conftest import project

__all__ = ["project"]
