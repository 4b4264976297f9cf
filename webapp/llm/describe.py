"""The catalog as users see it: each configuration with the model that would serve it now."""

from __future__ import annotations

from typing import Any

from webapp.llm.catalog import Catalog
from webapp.llm.routing import RoutingError, resolve


def configuration_dicts(catalog: Catalog) -> list[dict[str, Any]]:
    described = []
    for spec in catalog.configurations.values():
        entry: dict[str, Any] = {
            "name": spec.name,
            "kind": "fixed" if spec.model is not None else "criteria",
            "model": spec.model,
            "criteria": None,
            "fallbacks": list(spec.fallbacks),
            "max_tokens": spec.max_tokens,
            "trim_to": spec.trim_to,
            "serving_model": None,
            "window": None,
        }
        if spec.criteria is not None:
            entry["criteria"] = {
                "capabilities": sorted(spec.criteria.capabilities),
                "min_context_window": spec.criteria.min_context_window,
                "max_cost_input": spec.criteria.max_cost_input,
                "prefer_lowest_cost": spec.criteria.prefer_lowest_cost,
            }
        try:
            primary = resolve(catalog, spec.name).primary
        except RoutingError:
            pass
        else:
            entry["serving_model"] = primary.name
            entry["window"] = primary.window
        described.append(entry)
    return described
