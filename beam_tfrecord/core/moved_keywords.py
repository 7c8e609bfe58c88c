"""``refuses_moved_keywords``: a class whose keyword arguments moved into option groups names each one's new home.

Invariant: only the names listed are refused (with a ``TypeError``, as Python's own for a keyword it does not
know); the class's signature stays its ``__init__``'s. ``beam.write.MOVED_KEYWORDS`` lists the writer's.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

T = TypeVar("T", bound=type)


def refuses_moved_keywords(moved: Mapping[str, str]) -> Callable[[T], T]:
    """A class decorator: a call that passes a keyword of ``moved`` (name -> its new home) is a ``TypeError``
    naming them all, before ``__init__`` runs."""

    def decorate(cls: T) -> T:
        signature = inspect.signature(cls)  # its __init__'s, read before __new__ hides it

        def __new__(klass: type, *args: Any, **keywords: Any) -> Any:
            names = [name for name in keywords if name in moved]
            if names:
                raise TypeError(f"{klass.__name__}() no longer takes {', '.join(names)}: pass "
                                + "; ".join(f"{name} as {moved[name]}" for name in names))
            return object.__new__(klass)  # the classes it decorates keep object's __new__

        cls.__new__ = __new__  # type: ignore[assignment]
        cls.__signature__ = signature  # type: ignore[attr-defined]
        return cls

    return decorate
