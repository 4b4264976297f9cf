"""Which model serves a call: a configuration names one, or describes one by criteria.

Criteria are resolved on every call against the catalog as it is now, and the
answer is never written back into the configuration: a cheaper or larger model
added tomorrow is picked up tomorrow.
"""

from __future__ import annotations

from dataclasses import dataclass

from webapp.llm.catalog import Catalog, ConfigurationSpec, ModelSpec


class RoutingError(LookupError):
    """The configuration cannot be served: unknown name, or no model fits its criteria."""


@dataclass(frozen=True, slots=True)
class Route:
    configuration: ConfigurationSpec
    models: tuple[ModelSpec, ...]
    """The model to try first, then the fallbacks in order, without repeats."""

    @property
    def primary(self) -> ModelSpec:
        return self.models[0]


def resolve(catalog: Catalog, configuration: str) -> Route:
    spec = catalog.configurations.get(configuration)
    if spec is None:
        raise RoutingError(f"unknown configuration {configuration!r}")
    if spec.model is not None:
        primary = catalog.models[spec.model]
    else:
        assert spec.criteria is not None
        candidates = catalog.candidates(spec.criteria)
        if not candidates:
            raise RoutingError(f"no model matches the criteria of configuration {spec.name!r}")
        primary = candidates[0]
    chain = [primary]
    for name in spec.fallbacks:
        model = catalog.models[name]
        if model not in chain:
            chain.append(model)
    return Route(configuration=spec, models=tuple(chain))
