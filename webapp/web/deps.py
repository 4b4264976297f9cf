"""The app-wide dependencies (`create_app` provides them), named as handlers declare them.

Litestar 3 stops inferring that a parameter is a dependency from its name alone; these
aliases mark it, and keep each dependency's type in one place.
"""

from __future__ import annotations

from litestar.di import NamedDependency

Owner = NamedDependency[str]
"""Who the request acts for (`owner`): the signed-in user's owner key."""
