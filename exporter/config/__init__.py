"""Configuration: schema, loading and validation."""

from exporter.config.loader import ENV_PREFIX, Leaf, leaves, load_config
from exporter.config.schema import Config, SourceConfig

__all__ = ["ENV_PREFIX", "Config", "Leaf", "SourceConfig", "leaves", "load_config"]
