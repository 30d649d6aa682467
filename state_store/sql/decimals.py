"""Spark's types of decimal arithmetic, where sqlglot's annotation falls short: a literal with a point is a
``DECIMAL(p, s)`` (``0.908``: ``DECIMAL(3, 3)``), as in Spark and Flink (sqlglot says ``DOUBLE``), and ``+ - * / %``
with a decimal operand get Spark's precision and scale (``DecimalPrecision``: ``p1 + p2 + 1, s1 + s2`` for ``*``,
bounded at 38 digits keeping at least 6 of scale), so that ``0.908 * price`` has a scale of 3 as Flink's has."""
from __future__ import annotations

from sqlglot import exp

MAX_PRECISION = 38
INTEGERS = {exp.DataType.Type.TINYINT: 3, exp.DataType.Type.SMALLINT: 5, exp.DataType.Type.INT: 10,
            exp.DataType.Type.BIGINT: 20}


def _decimal(precision: int, scale: int) -> exp.DataType:
    if precision > MAX_PRECISION:  # Spark's adjustPrecisionScale
        scale = max(MAX_PRECISION - (precision - scale), min(scale, 6))
        precision = MAX_PRECISION
    return exp.DataType.build(f"DECIMAL({precision}, {scale})")


def _precision_scale(data_type: exp.DataType | None) -> tuple[int, int] | None:
    """A decimal's or an integer's (precision, scale); None for any other type."""
    if data_type is None:
        return None
    if data_type.this == exp.DataType.Type.DECIMAL and len(data_type.expressions) == 2:
        precision, scale = (int(e.name) for e in data_type.expressions)
        return precision, scale
    digits = INTEGERS.get(data_type.this)
    return None if digits is None else (digits, 0)


def _literal(node: exp.Literal) -> exp.DataType | None:
    text = node.name
    if node.is_string or "." not in text or "e" in text.lower():
        return None
    whole, fraction = text.lstrip("+-").split(".", 1)
    digits = (whole + fraction).lstrip("0")
    return _decimal(max(len(digits), len(fraction), 1), len(fraction))


def _arithmetic(node: exp.Binary) -> exp.DataType | None:
    left, right = _precision_scale(node.left.type), _precision_scale(node.right.type)
    is_decimal = [t is not None and t.this == exp.DataType.Type.DECIMAL for t in (node.left.type, node.right.type)]
    if left is None or right is None or not any(is_decimal):
        return None
    (p1, s1), (p2, s2) = left, right
    if isinstance(node, (exp.Add, exp.Sub)):
        scale = max(s1, s2)
        return _decimal(max(p1 - s1, p2 - s2) + scale + 1, scale)
    if isinstance(node, exp.Mul):
        return _decimal(p1 + p2 + 1, s1 + s2)
    if isinstance(node, exp.Div):
        scale = max(6, s1 + p2 + 1)
        return _decimal(p1 - s1 + s2 + scale, scale)
    if isinstance(node, exp.Mod):
        scale = max(s1, s2)
        return _decimal(min(p1 - s1, p2 - s2) + scale, scale)
    return None


def with_decimal_types(node: exp.Expression) -> exp.Expression:
    """``node`` (annotated by sqlglot) with Spark's types of its decimal literals and decimal arithmetic, set from
    the leaves up; a comparison or function over them keeps sqlglot's."""
    for child in reversed(list(node.walk())):
        if isinstance(child, exp.Literal):
            data_type = _literal(child)
        elif isinstance(child, (exp.Add, exp.Sub, exp.Mul, exp.Div, exp.Mod)):
            data_type = _arithmetic(child)
        elif isinstance(child, exp.Paren):
            data_type = child.this.type
        elif isinstance(child, exp.Alias):
            data_type = child.this.type
        else:
            data_type = None
        if data_type is not None:
            child.type = data_type
    return node
