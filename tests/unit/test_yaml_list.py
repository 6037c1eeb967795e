"""The packaged YAML registries read the same through libyaml's loader and PyYAML's own."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from exporter import yaml_list


@pytest.mark.parametrize("name", ["trend_rules.yaml", "noisy_signals.yaml"])
def test_each_registry_loads_the_same_with_both_loaders(name: str) -> None:
    text = resources.files("exporter").joinpath(name).read_text(encoding="utf-8")
    assert yaml.load(text, Loader=yaml_list.SAFE_LOADER) == yaml.safe_load(text)


def test_the_fast_loader_is_used_where_pyyaml_has_it() -> None:
    # PyYAML's wheels are built with libyaml; without it the pure-Python loader serves.
    expected = "CSafeLoader" if yaml.__with_libyaml__ else "SafeLoader"
    assert yaml_list.SAFE_LOADER.__name__ == expected


def test_a_document_without_the_list_is_the_callers_error() -> None:
    class Bad(Exception):
        pass

    with pytest.raises(Bad, match="the document needs a list under 'rules'"):
        yaml_list.listed("rules: {}\n", "rules", "trend rules", Bad)
    with pytest.raises(yaml.YAMLError):
        yaml_list.listed("rules: [\n", "rules", "trend rules", Bad)
    assert yaml_list.listed("rules: [1, 2]\n", "rules", "trend rules", Bad) == [1, 2]
