import pytest

from .releases import install


@pytest.fixture(scope="session")
def previous_release():
    """The release this one replaces, installed from its commit into its own venv (cached in .releases/)."""
    return install()
