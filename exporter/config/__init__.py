"""Configuration: schema, loading and validation."""

from exporter.config.keys import ENV_PREFIX, Leaf, leaves
from exporter.config.loader import load_config
from exporter.config.root import Config
from exporter.config.source import SourceConfig

__all__ = ["ENV_PREFIX", "Config", "Leaf", "SourceConfig", "leaves", "load_config"]
