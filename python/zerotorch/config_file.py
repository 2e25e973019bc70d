"""A config given to the Python package (a dict, or a JSON or YAML file) read for the few keys
the Python side acts on before the engine exists; the engine reads the config for real
(core/config/loader.cpp)."""

import json
import os


def read(config):
    """The config as a dict, or None when it cannot be read here (a file with hjson's comments
    or trailing commas, which only the engine's reader takes)."""
    if config is None or isinstance(config, dict):
        return config
    path = os.fspath(config)
    try:
        with open(path) as f:
            if path.endswith((".yaml", ".yml")):
                import yaml
                return yaml.safe_load(f)
            return json.load(f)
    except (OSError, ValueError, ImportError):
        return None
