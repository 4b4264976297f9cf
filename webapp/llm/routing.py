"""Which model serves a call: a configuration names one, or describes one by criteria.

Criteria are resolved on every call against the catalog as it is now, and the
answer is never written back into the configuration: a cheaper or larger model
added tomorrow is picked up tomorrow.
"""

from __future__ import annotations

from dataclasses import dataclass

from webapp.llm.catalog import Catalog, ConfigurationSpec, Criteria, ModelSpec


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
        matching = candidates(catalog, spec.criteria)
        if not matching:
            raise RoutingError(f"no model matches the criteria of configuration {spec.name!r}")
        primary = matching[0]
    chain = [primary]
    for name in spec.fallbacks:
        model = catalog.models[name]
        if model not in chain:
            chain.append(model)
    return Route(configuration=spec, models=tuple(chain))


def candidates(catalog: Catalog, criteria: Criteria) -> list[ModelSpec]:
    """Models matching `criteria`, best first, in an order that never depends on chance:
    lowest cost first when asked (unknown cost last, since it may be anything), else the
    largest window first, since a bigger window trims less. Ties break on the name."""
    matching = [model for model in catalog.models.values() if criteria.matches(model)]
    if criteria.prefer_lowest_cost:
        return sorted(matching, key=_by_cost)
    return sorted(matching, key=lambda model: (-model.window, model.name))


def _by_cost(model: ModelSpec) -> tuple[bool, float, str]:
    """Input and output price together; a model missing either price has an unknown cost."""
    if model.cost_input is None or model.cost_output is None:
        return True, 0.0, model.name
    return False, model.cost_input + model.cost_output, model.name
