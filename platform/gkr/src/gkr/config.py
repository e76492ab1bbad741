"""Where gkr finds the fleet spec and the user's defaults.

Fleet spec: --fleet, else $GKR_FLEET, else `fleet:` in the user config, else
the nearest fleet.yaml from the current folder up. User config:
$XDG_CONFIG_HOME/gkr/config.yaml (default ~/.config/gkr/config.yaml) with
optional `fleet`, `team`, `region`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import safeyaml


@dataclass(frozen=True)
class UserConfig:
    fleet: str | None = None
    team: str | None = None
    region: str | None = None


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "gkr" / "config.yaml"


def user_config() -> UserConfig:
    path = config_path()
    if not path.is_file():
        return UserConfig()
    try:  # bounded like every other YAML the platform reads (platform/safeyaml)
        data = safeyaml.load(safeyaml.read_text(path)) or {}
    except safeyaml.YamlError as exc:
        raise ValueError(f"{path}:{exc.line}: {exc.message}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping with fleet, team, region")
    unknown = sorted(set(data) - {"fleet", "team", "region"})
    if unknown:
        raise ValueError(f"{path}: unknown key {unknown[0]!r}; use fleet, team or region")
    return UserConfig(**{k: str(v) for k, v in data.items()})


def find_fleet(explicit: str | None, config: UserConfig) -> Path:
    for candidate in (explicit, os.environ.get("GKR_FLEET"), config.fleet):
        if candidate:
            return Path(candidate).expanduser()
    here = Path.cwd()
    for folder in (here, *here.parents):
        if (folder / "fleet.yaml").is_file():
            return folder / "fleet.yaml"
    raise ValueError("no fleet.yaml found: pass --fleet, set GKR_FLEET, or add `fleet:` to " + str(config_path()))
