"""`record`: the class decorator of the value types built for every occurrence delivered.

The sender builds about a dozen values per occurrence (the message and its decoded body,
the reminder's row, the stage types of `sender.work`, the email, the receipt, the
completer's row). As `dataclass(frozen=True, slots=True)` each cost CPython one
`object.__setattr__` call per field in `__init__`: 1.9 µs for ten fields against 0.24 µs
for a plain slotted dataclass (Python 3.11, measured), about a sixth of the senders' CPU
per occurrence in `bench/end_to_end.py` (docs/performance.md, "Cheaper values per
occurrence").
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar, dataclass_transform

T = TypeVar("T")


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
def record(cls: type[T]) -> type[T]:
    """`cls` as a slotted dataclass, frozen for the type checker.

    Type checkers see `dataclass(frozen=True, slots=True)` (PEP 681 `frozen_default`):
    mypy refuses an assignment to a field, and CI runs mypy --strict over every package.
    At run time it is `dataclass(slots=True, unsafe_hash=True)`: equal and hashed by its
    fields as a frozen one, built at the cost of a plain one; an assignment is not
    refused at run time. Use it for the types built per occurrence on the delivery path;
    elsewhere `dataclass(frozen=True, slots=True)` costs nothing that matters.

    Args:
        cls: a class with annotated fields, as for `dataclasses.dataclass`.

    Returns:
        The dataclass (a new class: `slots=True` makes one).
    """
    return dataclasses.dataclass(slots=True, unsafe_hash=True)(cls)
