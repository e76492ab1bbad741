"""The user's defaults: $XDG_CONFIG_HOME/gkr/config.yaml (default ~/.config/gkr/config.yaml).

Optional keys: `registry` (where the fleet registry is: see gkr.registry), `team`, `region`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import safeyaml
from contract import registry as contract
from contract.problem import Invalid, one_of

KEYS = ("registry", "team", "region")
REPLACED = "fleet"  # before the registry: the path of fleet.yaml


@dataclass(frozen=True)
class UserConfig:
    registry: str | None = None
    team: str | None = None
    region: str | None = None


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gkr" / "config.yaml"


def user_config() -> UserConfig:
    """The user config, or none; Invalid (one line, naming the file) when it cannot be used."""
    path = config_path()
    if not path.is_file():
        return UserConfig()
    try:  # bounded like every other YAML the platform reads (platform/safeyaml)
        data = safeyaml.load(safeyaml.read_text(path)) or {}
    except OSError as exc:
        raise Invalid([f"{path}: cannot read it ({exc.strerror})"]) from None
    except safeyaml.YamlError as exc:
        raise Invalid([f"{path}:{exc.line}: {exc.message}"]) from None
    if not isinstance(data, dict):
        raise Invalid([f"{path}: expected a mapping with {', '.join(KEYS)}"])
    if REPLACED in data:
        raise Invalid(
            [
                f"{path}: `{REPLACED}:` is replaced by `registry:`, the folder `make generate` writes beside "
                f"fleet.yaml ({contract.GENERATED_DIR}/); or drop it and run `gkr registry fetch`"
            ]
        )
    unknown = sorted(str(k) for k in set(data) - set(KEYS))
    if unknown:
        raise Invalid([f"{path}: unknown key {unknown[0]!r}; {one_of(KEYS, unknown[0])}"])
    return UserConfig(**{k: str(v) for k, v in data.items()})
