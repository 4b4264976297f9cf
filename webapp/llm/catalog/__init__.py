"""Providers, models, configurations and embeds, loaded from one TOML file.

The catalog is read once at start. A bad file must stop the app with a message a person
can act on, so validation never stops at the first problem: every error line names the
file, the entry (table, index from 0, and name when it has one) and the field, and all
of them are reported together. When no file is configured the built-in catalog serves
the offline demo model, so a fresh checkout chats without any network or key.

models.py holds the specs (pydantic models that are the file's schema too), checks.py
the checks of single values, load.py reading the file and its problems' words.
"""

from webapp.llm.catalog.checks import split_tokenizer
from webapp.llm.catalog.load import CatalogError, builtin_catalog, load_catalog, parse_catalog
from webapp.llm.catalog.models import (
    DEFAULT_WINDOW,
    DEMO_WINDOW,
    Catalog,
    ConfigurationSpec,
    Criteria,
    EmbedSpec,
    ModelSpec,
    ProviderKind,
    ProviderSpec,
)

__all__ = [
    "DEFAULT_WINDOW",
    "DEMO_WINDOW",
    "Catalog",
    "CatalogError",
    "ConfigurationSpec",
    "Criteria",
    "EmbedSpec",
    "ModelSpec",
    "ProviderKind",
    "ProviderSpec",
    "builtin_catalog",
    "load_catalog",
    "parse_catalog",
    "split_tokenizer",
]
