"""Declarative constraint tables (from a TOML or JSON config) turned into the constraint DSL.

A constraint is a table with exactly one kind key and an optional scope::

    {sum_equal = {expr = {greater_than = ["AGE", "75+"]}, value = 0}, level = "all"}
    {structural_zero = {expr = {and = [{equal = ["HOUSING", 2]}, {less_than = ["AGE", "18-24"]}]}}}
    {sum_equal_real_total = {expr = {true = {}}}, level = 0}
    {sum_less_equal = {expr = {in = ["RAC1P", [3, 4, 5]]}, value = 100},
     level = 2, nodes = ["01-01301"]}

Kinds: ``sum_equal``, ``sum_less_equal``, ``sum_greater_equal`` (need ``value``),
``structural_zero`` and ``sum_equal_real_total`` (an invariant: published exactly). Each takes
``expr`` and an optional ``name``.

An expression is a one-key table: ``equal``, ``not_equal``, ``greater_than``,
``greater_equal``, ``less_than``, ``less_equal`` (``[attribute, value]``), ``in``
(``[attribute, [values]]``), ``in_group`` (``[attribute, recode, group]``: the values of one
group of the attribute's recode, e.g. ``{in_group = ["HHGQ", "hhinst", "Institutional
Facility"]}``), ``and`` / ``or`` (a list of expressions), ``not`` (one
expression), ``implies`` (``[premise, conclusion]``), ``true = {}`` and ``false = {}``.

Scope: ``level = "all"`` (default: every node of every level), ``level = k`` (level k only,
0 = root), and ``nodes = [labels]`` (those nodes of level k). Every attribute and value is
checked against the declared domain here, at load, and the constraints of each level are checked
for contradictions, so a typo is reported with its key instead of failing mid-release.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Any

from constraints import (
    And,
    ConstraintSet,
    Equal,
    Expression,
    FalseExpression,
    GreaterThan,
    GreaterThanOrEqual,
    Implies,
    In,
    InGroup,
    LessThan,
    LessThanOrEqual,
    Not,
    NotEqual,
    Or,
    StructuralZero,
    SumEqual,
    SumEqualRealTotal,
    SumGreaterEqual,
    SumLessEqual,
    TrueExpression,
    check_node,
)
from constraints.aggregate_constraints import AUTO_NAME
from constraints.constraint import Constraint
from constraints.domain import Domain
from constraints.errors import DomainError

__all__ = ["parse_constraints", "parse_expression", "KINDS", "EXPRESSIONS"]

_COMPARISONS: dict[str, type] = {
    "equal": Equal,
    "not_equal": NotEqual,
    "greater_than": GreaterThan,
    "greater_equal": GreaterThanOrEqual,
    "less_than": LessThan,
    "less_equal": LessThanOrEqual,
}
EXPRESSIONS = tuple(_COMPARISONS) + (
    "in",
    "in_group",
    "and",
    "or",
    "not",
    "implies",
    "true",
    "false",
)
_AGGREGATES: dict[str, type] = {
    "sum_equal": SumEqual,
    "sum_less_equal": SumLessEqual,
    "sum_greater_equal": SumGreaterEqual,
}
KINDS = tuple(_AGGREGATES) + ("structural_zero", "sum_equal_real_total")

# fail(key, rule) raises the caller's error type (a ConfigError naming the file)
Fail = Callable[[str, str], Exception]


def parse_expression(spec: Any, domain: Domain, key: str, fail: Fail) -> Expression:
    """One expression table (see the module docstring), checked against ``domain``."""
    if not isinstance(spec, Mapping) or len(spec) != 1:
        raise fail(
            key,
            f"an expression must be a table with exactly one of {list(EXPRESSIONS)}; got {spec!r}",
        )
    ((op, arg),) = spec.items()
    sub = f"{key}.{op}"
    if op in _COMPARISONS or op == "in":
        if not isinstance(arg, Sequence) or isinstance(arg, str) or len(arg) != 2:
            what = "[attribute, [values]]" if op == "in" else "[attribute, value]"
            raise fail(sub, f"must be a two-element list {what}; got {arg!r}")
        attribute, value = arg
        _check_attribute(attribute, domain, sub, fail)
        if op == "in":
            if isinstance(value, str) or not isinstance(value, Sequence):
                raise fail(sub, f"values ({value!r}) must be a list of values of {attribute!r}")
            for v in value:
                _check_value(attribute, v, domain, sub, fail)
            return In(attribute, tuple(value))
        _check_value(attribute, value, domain, sub, fail)
        return _COMPARISONS[op](attribute, value)
    if op == "in_group":
        if isinstance(arg, (str, Mapping)) or not isinstance(arg, Sequence) or len(arg) != 3:
            raise fail(sub, f"must be a three-element list [attribute, recode, group]; got {arg!r}")
        attribute, recode, group = arg
        _check_attribute(attribute, domain, sub, fail)
        try:
            expr = InGroup(attribute, recode, group)
            expr.values(domain)
        except ValueError as err:  # ConstraintError, DomainError: the DSL's own message
            raise fail(sub, str(err)) from None
        return expr
    if op in ("and", "or"):
        if isinstance(arg, Mapping) or not isinstance(arg, Sequence) or len(arg) < 1:
            raise fail(sub, f"must be a non-empty list of expressions; got {arg!r}")
        parts = [parse_expression(e, domain, f"{sub}[{i}]", fail) for i, e in enumerate(arg)]
        return And(*parts) if op == "and" else Or(*parts)
    if op == "not":
        return Not(parse_expression(arg, domain, sub, fail))
    if op == "implies":
        if isinstance(arg, Mapping) or not isinstance(arg, Sequence) or len(arg) != 2:
            raise fail(sub, f"must be a two-element list [premise, conclusion]; got {arg!r}")
        return Implies(
            parse_expression(arg[0], domain, f"{sub}[0]", fail),
            parse_expression(arg[1], domain, f"{sub}[1]", fail),
        )
    if op in ("true", "false"):
        if arg not in ({}, True):
            raise fail(sub, f"takes an empty table ({op} = {{}}); got {arg!r}")
        return TrueExpression() if op == "true" else FalseExpression()
    raise fail(key, f"unknown expression {op!r}; expressions are {list(EXPRESSIONS)}")


def parse_constraints(
    specs: Any, domain: Domain, n_levels: int, fail: Fail, key: str = "constraints"
) -> ConstraintSet:
    """The ``constraints`` list of a config as a ConstraintSet, checked for contradictions."""
    if not isinstance(specs, Sequence) or isinstance(specs, (str, Mapping)):
        raise fail(key, f"must be a list of constraint tables ([[constraints]]); got {specs!r}")
    cs = ConstraintSet(n_levels=n_levels)
    for i, spec in enumerate(specs):
        ckey = f"{key}[{i}]"
        constraint, level, nodes = _parse_one(spec, domain, n_levels, ckey, fail)
        cs.add(constraint, level=level, nodes=nodes)
    _check_contradictions(cs, domain, n_levels, key, fail)
    return cs


def _parse_one(
    spec: Any, domain: Domain, n_levels: int, key: str, fail: Fail
) -> tuple[Constraint, int | None, list[str] | None]:
    if not isinstance(spec, Mapping):
        raise fail(key, f"a constraint must be a table; got {spec!r}")
    kinds = [k for k in spec if k in KINDS]
    unknown = [k for k in spec if k not in KINDS and k not in ("level", "nodes")]
    if unknown:
        raise fail(
            f"{key}.{unknown[0]}",
            f"unknown key; a constraint has one of {list(KINDS)} and optional level, nodes",
        )
    if len(kinds) != 1:
        raise fail(key, f"a constraint needs exactly one of {list(KINDS)}; got {sorted(spec)}")
    kind = kinds[0]
    body = spec[kind]
    bkey = f"{key}.{kind}"
    if not isinstance(body, Mapping):
        raise fail(bkey, f"must be a table with expr (and value); got {body!r}")
    allowed = {"expr", "name"} | ({"value"} if kind in _AGGREGATES else set())
    extra = sorted(set(body) - allowed)
    if extra:
        raise fail(f"{bkey}.{extra[0]}", f"unknown key; {kind} takes {sorted(allowed)}")
    if "expr" not in body:
        raise fail(f"{bkey}.expr", "is required: the expression selecting the cells")
    expr = parse_expression(body["expr"], domain, f"{bkey}.expr", fail)
    name = body.get("name", AUTO_NAME)
    if not isinstance(name, str):
        raise fail(f"{bkey}.name", f"must be a string; got {name!r}")
    try:
        if kind in _AGGREGATES:
            if "value" not in body:
                raise fail(
                    f"{bkey}.value", "is required: the number the selected cells are compared with"
                )
            value = body["value"]
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise fail(f"{bkey}.value", f"must be a number; got {value!r}")
            constraint: Constraint = _AGGREGATES[kind](expr, value, name=name)
        elif kind == "structural_zero":
            constraint = StructuralZero(expr, name=name)
        else:
            constraint = SumEqualRealTotal(expr, name=name)
    except ValueError as err:  # the DSL's own checks (ConstraintError is a ValueError)
        raise fail(bkey, str(err)) from None
    level, nodes = _scope(spec, n_levels, key, fail)
    return constraint, level, nodes


def _scope(
    spec: Mapping, n_levels: int, key: str, fail: Fail
) -> tuple[int | None, list[str] | None]:
    level = spec.get("level", "all")
    if level == "all":
        level = None
    elif isinstance(level, bool) or not isinstance(level, int) or not 0 <= level < n_levels:
        raise fail(
            f"{key}.level",
            f'must be "all" or a level number 0..{n_levels - 1} (0 = root); got {level!r}',
        )
    nodes = spec.get("nodes")
    if nodes is not None:
        if level is None:
            raise fail(f"{key}.nodes", "needs a level: node labels are unique only within a level")
        if isinstance(nodes, str) or not isinstance(nodes, Sequence) or not nodes:
            raise fail(f"{key}.nodes", f"must be a non-empty list of node labels; got {nodes!r}")
        nodes = [str(n) for n in nodes]
    return level, nodes


def _check_attribute(attribute: Any, domain: Domain, key: str, fail: Fail) -> None:
    """Domain's own check, with the config key added (one rule, one message)."""
    try:
        domain.axis(attribute)
    except DomainError as err:
        raise fail(key, str(err)) from None


def _check_value(attribute: str, value: Any, domain: Domain, key: str, fail: Fail) -> None:
    if isinstance(value, bool):  # True == 1 in Python, never a value of a declared domain here
        raise fail(key, f"value {value!r} of {attribute!r} must not be a boolean")
    try:
        domain.index_of(attribute, value)
    except DomainError as err:
        raise fail(key, str(err)) from None


def _check_contradictions(
    cs: ConstraintSet, domain: Domain, n_levels: int, key: str, fail: Fail
) -> None:
    """Constraints that no node of a level could satisfy together (invariants are unknown yet)."""
    for level in range(n_levels):
        general = [c for c in cs.for_level(level) if not c.is_invariant]
        groups: dict[Hashable, list[Constraint]] = {None: general}
        for label, specific in cs.node_specific(level).items():
            groups[label] = general + [c for c in specific if not c.is_invariant]
        for label, group in groups.items():
            if not group:
                continue
            try:
                check_node(group, domain, node=label)
            except ValueError as err:
                where = f"level {level}" + (f", node {label!r}" if label is not None else "")
                raise fail(key, f"contradictory constraints at {where}: {err}") from None
