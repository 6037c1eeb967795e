"""A ValidatingAdmissionPolicy judged as the API server judges it, with cel-python.

The API server's order (k8s.io/apiserver admission/plugin/policy/validating):

1. ``spec.matchConstraints.resourceRules``: the request's group, version, resource (with
   its subresource, as ``nodes/status``) and operation must match a rule, else the
   policy does not apply;
2. ``spec.matchConditions``: any one false and the policy does not apply; an error
   (and none false) is a failure, refused under ``failurePolicy: Fail``;
3. ``spec.variables``, each seeing those before it as ``variables.<name>``; an error
   is an error of every expression that reads the variable (lazy in the API server;
   here evaluated in order and kept as CEL error values, which CEL's ``||``/``&&``
   absorb exactly as a lazy read would);
4. ``spec.validations``: each must be ``true``; ``false`` refuses with its message, an
   error or a non-bool is a failure (``Fail``: refused).

The CEL variables are those the API server gives: ``request`` (the AdmissionRequest as
JSON, empty fields left out), ``object`` (null on DELETE), ``oldObject`` (null on CREATE).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import celpy
from celpy import celtypes
from celpy.evaluation import CELEvalError


@dataclass(frozen=True)
class Decision:
    """What admission made of one request under one policy."""

    # The policy applied: its rules and match conditions matched the request.
    matched: bool
    allowed: bool
    # The refusals: each failing validation's message (or its evaluation error).
    denials: tuple[str, ...] = ()


_ENV = celpy.Environment()


@functools.cache
def _program(expression: str) -> Any:
    return _ENV.program(_ENV.compile(expression))


def _evaluate(expression: str, activation: Mapping[str, Any]) -> Any:
    """The expression's value, or the CELEvalError it evaluated to."""
    try:
        return _program(expression).evaluate(dict(activation))
    except CELEvalError as exc:
        return exc


def _rule_matches(rule: Mapping[str, Any], request: Mapping[str, Any]) -> bool:
    """An admissionregistration NamedRuleWithOperations against the request's attributes."""
    resource = request["resource"]
    sub = request.get("subResource", "")
    wanted = f"{resource['resource']}/{sub}" if sub else resource["resource"]

    def has(values: Sequence[str], value: str) -> bool:
        return "*" in values or value in values

    def resource_ok(patterns: Sequence[str]) -> bool:
        for pattern in patterns:
            if pattern == "*/*" or pattern == wanted:
                return True
            res, _, subres = pattern.partition("/")
            if res == "*" and (subres == sub if subres else not sub):
                return True
            if subres == "*" and res == resource["resource"] and sub:
                return True
        return False

    return (
        has(rule.get("apiGroups", []), resource["group"])
        and has(rule.get("apiVersions", []), resource["version"])
        and has(rule.get("operations", []), request["operation"])
        and resource_ok(rule.get("resources", []))
    )


def admit(
    policy: Mapping[str, Any],
    request: Mapping[str, Any],
    obj: Mapping[str, Any] | None,
    old: Mapping[str, Any] | None,
) -> Decision:
    """The policy's decision on a request (``obj``/``old``: its object and old object)."""
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"  # errors below are refusals because of it
    if not any(_rule_matches(r, request) for r in spec["matchConstraints"]["resourceRules"]):
        return Decision(matched=False, allowed=True)
    activation: dict[str, Any] = {
        "request": celpy.json_to_cel(dict(request)),
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
    }
    errors = []
    for condition in spec.get("matchConditions", []):
        value = _evaluate(condition["expression"], activation)
        if isinstance(value, celtypes.BoolType) and not value:
            return Decision(matched=False, allowed=True)
        if not isinstance(value, celtypes.BoolType):
            errors.append(f"matchCondition {condition['name']}: {value}")
    if errors:
        return Decision(matched=True, allowed=False, denials=tuple(errors))
    variables: dict[celtypes.StringType, Any] = {}
    for variable in spec.get("variables", []):
        scope = {**activation, "variables": celtypes.MapType(variables)}
        variables[celtypes.StringType(variable["name"])] = _evaluate(variable["expression"], scope)
    scope = {**activation, "variables": celtypes.MapType(variables)}
    denials = []
    for validation in spec["validations"]:
        value = _evaluate(validation["expression"], scope)
        if not isinstance(value, celtypes.BoolType):
            denials.append(f"expression {validation['expression']!r}: {value}")
        elif not value:
            denials.append(" ".join(validation["message"].split()))
    return Decision(matched=True, allowed=not denials, denials=tuple(denials))
