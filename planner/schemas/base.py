"""Shared base for every schema: frozen, unknown keys rejected."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """Immutable pydantic model that rejects unknown keys (``extra="forbid"``).

    Catalog YAML and user input go through these models, so a misspelt key is an error with
    the key's name, never silently ignored; infinities and NaN are refused in every float field
    (``allow_inf_nan=False``): no size, rate or price of a plan is infinite, and JSON cannot
    carry them.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, defer_build=True)


GIB_BYTES = 1024**3
"""One GiB in bytes (binary). Memory sizes at the YAML/display edge are GiB."""

GB_BYTES = 1e9
"""One GB in bytes (decimal). Link and HBM bandwidths are quoted in GB/s or TB/s decimal."""

TB_BYTES = 1e12
"""One TB in bytes (decimal)."""

TERA = 1e12
"""Datasheets quote FLOP/s in TFLOP/s (decimal)."""
