"""The release: published with the counting settings, sent with every HTTP answer (X-Tally-Version), and the
distribution's version (tally-dynamodb on PyPI; pyproject.toml reads it from here). CHANGELOG.md says what each
release changes, and how to upgrade to it and roll back from it.

A module of its own, so that the modules inside the package take it from here rather than from the package face
(``tally``), which imports the read API.
"""

__version__ = "0.3.1"
