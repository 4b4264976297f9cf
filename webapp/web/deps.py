"""The app-wide dependencies (`create_app` provides them), named as handlers declare them.

Litestar 3 stops inferring that a parameter is a dependency from its name alone; these
aliases mark it, and keep each dependency's type in one place.
"""

from __future__ import annotations

from litestar.di import NamedDependency

from webapp.llm.catalog import Catalog
from webapp.settings import Settings

Owner = NamedDependency[str]
"""Who the request acts for (`owner`): the signed-in user's owner key."""

AppSettings = NamedDependency[Settings]
"""The settings the app was built with (`settings`)."""

ServedCatalog = NamedDependency[Catalog]
"""The catalog as it is served (`catalog`): the models' windows are those the engines
named at start, so it is asked for per request rather than kept from before."""
