"""The exception tree under its public name: ``cdcflow.errors.ConfigError`` and the rest.

The tree is defined once, on the ground floor (connectors/errors.py, drawn in its docstring), so
the connectors and the Spark job raise the same classes without importing the platform.
"""

from __future__ import annotations

from connectors.errors import *  # noqa: F403
from connectors.errors import __all__  # noqa: F401
