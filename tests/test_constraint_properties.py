"""Property tests: masks, rows and CVXPY constraints agree with a dense brute-force reference.

Random domains (1-3 attributes of 1-4 values, ints or strings in shuffled declared order) and
random expression trees (depth <= 3); the reference evaluates each cell's labels with Python
comparisons on *positions* in the declared order.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constraints import (
    Domain,
    StructuralZero,
    SumEqual,
    SumGreaterEqual,
    SumLessEqual,
    compile_rows,
    joint_rows,
    to_cvxpy,
    zero_mask,
)
from constraints.logical_expressions.atomic import (
    Equal,
    FalseExpression,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
    NotEqual,
    TrueExpression,
)
from constraints.logical_expressions.compound import And, Implies, Not, Or

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
COMPARISONS = {
    Equal: "==",
    NotEqual: "!=",
    GreaterThan: ">",
    GreaterThanOrEqual: ">=",
    LessThan: "<",
    LessThanOrEqual: "<=",
}


@st.composite
def domains(draw) -> Domain:
    n_attr = draw(st.integers(1, 3))
    attrs = {}
    for i in range(n_attr):
        k = draw(st.integers(1, 4))
        if draw(st.booleans()):
            vals = draw(st.permutations(list(range(k))))
        else:
            vals = draw(st.permutations([f"v{j}" for j in range(k)]))
        attrs[f"A{i}"] = vals
    return Domain(attrs)


def expressions(domain: Domain) -> st.SearchStrategy:
    names = domain.names
    atoms = st.one_of(
        st.sampled_from(names).flatmap(
            lambda a: st.builds(
                lambda cls, v: cls(a, v),
                st.sampled_from(list(COMPARISONS)),
                st.sampled_from(domain.values(a)),
            )
        ),
        st.sampled_from(names).flatmap(
            lambda a: st.lists(st.sampled_from(domain.values(a)), max_size=3).map(
                lambda vs: In(a, vs)
            )
        ),
        st.just(TrueExpression()),
        st.just(FalseExpression()),
    )
    return st.recursive(
        atoms,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3).map(lambda ops: And(*ops)),
            st.lists(inner, max_size=3).map(lambda ops: Or(*ops)),
            inner.map(Not),
            st.tuples(inner, inner).map(lambda ab: Implies(*ab)),
        ),
        max_leaves=6,
    )


def reference(expr, domain: Domain, labels: dict) -> bool:
    """Truth of ``expr`` at one cell, by positions in the declared order (no numpy)."""
    if isinstance(expr, TrueExpression):
        return True
    if isinstance(expr, FalseExpression):
        return False
    if isinstance(expr, In):
        return labels[expr.attribute] in expr.values
    if isinstance(expr, tuple(COMPARISONS)):
        p = domain.values(expr.attribute).index(labels[expr.attribute])
        q = domain.values(expr.attribute).index(expr.value)
        return {"==": p == q, "!=": p != q, ">": p > q, ">=": p >= q, "<": p < q, "<=": p <= q}[
            COMPARISONS[type(expr)]
        ]
    if isinstance(expr, And):
        return all(reference(o, domain, labels) for o in expr.operands)
    if isinstance(expr, Or):
        return any(reference(o, domain, labels) for o in expr.operands)
    if isinstance(expr, Not):
        return not reference(expr.operand, domain, labels)
    if isinstance(expr, Implies):
        return (not reference(expr.antecedent, domain, labels)) or reference(
            expr.consequent, domain, labels
        )
    raise AssertionError(f"unknown expression {expr!r}")


def reference_mask(expr, domain: Domain) -> np.ndarray:
    return np.array(
        [
            reference(expr, domain, dict(zip(domain.names, cell, strict=True)))
            for cell in domain.cell_labels()
        ],
        dtype=bool,
    )


@st.composite
def problems(draw, n_exprs: int = 3):
    domain = draw(domains())
    exprs = draw(st.lists(expressions(domain), min_size=1, max_size=n_exprs))
    kinds = draw(
        st.lists(
            st.sampled_from([SumEqual, SumLessEqual, SumGreaterEqual]),
            min_size=len(exprs),
            max_size=len(exprs),
        )
    )
    values = draw(st.lists(st.integers(0, 20), min_size=len(exprs), max_size=len(exprs)))
    cons = [k(e, v) for k, e, v in zip(kinds, exprs, values, strict=True)]
    x = np.array(
        draw(st.lists(st.integers(0, 9), min_size=domain.size, max_size=domain.size)), dtype=float
    )
    return domain, exprs, cons, x


@SETTINGS
@given(st.data())
def test_mask_matches_reference(data):
    domain = data.draw(domains())
    expr = data.draw(expressions(domain))
    assert (expr.mask(domain) == reference_mask(expr, domain)).all()
    assert (Not(expr).mask(domain) == ~reference_mask(expr, domain)).all()
    assert (StructuralZero(Not(expr)).zero_mask(domain) == zero_mask([expr], domain)).all()


@SETTINGS
@given(problems(), st.data())
def test_rows_match_reference_sums(problem, data):
    domain, exprs, cons, x = problem
    rows = compile_rows(cons, domain)
    ref = np.array([x[reference_mask(e, domain)].sum() for e in exprs])
    assert np.allclose(rows.A @ x, ref)
    # kept cells: columns follow ``cells``; dropped cells count as zero
    cells = np.array(data.draw(st.permutations(range(domain.size))), dtype=np.int64)
    cells = cells[: data.draw(st.integers(0, domain.size))]
    sub = compile_rows(cons, domain, cells=cells)
    x_kept = np.zeros(domain.size)
    x_kept[cells] = x[cells]
    assert np.allclose(sub.A @ x[cells], rows.A @ x_kept)
    assert (sub.lb == rows.lb).all() and (sub.ub == rows.ub).all()
    # joint rows of two children equal the per-child products
    other = compile_rows(cons[::-1], domain)
    j = joint_rows([rows, other], domain.size, labels=["p", "q"])
    y = x[::-1].copy()
    assert np.allclose(j.A @ np.concatenate([x, y]), np.concatenate([rows.A @ x, other.A @ y]))
    assert j.names[: rows.n_rows] == tuple(f"p: {n}" for n in rows.names)


@SETTINGS
@given(problems())
def test_cvxpy_agrees_with_rows(problem):
    domain, exprs, cons, x = problem
    zero = StructuralZero(exprs[0])
    rows = compile_rows(cons, domain)
    v = cp.Variable(domain.size)
    v.value = x
    cvx = to_cvxpy([*cons, zero], domain, v)
    total = sum(float(np.sum(c.violation())) for c in cvx)
    expected = rows.violation(x).sum() + np.abs(x[reference_mask(exprs[0], domain)]).sum()
    assert np.isclose(total, expected)
    ok = rows.satisfied(x) and not x[reference_mask(exprs[0], domain)].any()
    assert all(c.value() for c in cvx) == ok
