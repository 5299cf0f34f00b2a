"""What the cycle's tasks hand each other, typed, and its one JSON form.

Airflow carries a task's result to the tasks after it (XCom) and an asset event's extra to
the runs it triggers, as JSON. The cycle hands over three kinds of thing:

- the **scope** of a run: its namespace and whether it replays history (:class:`Scope`);
- a **unit** of mapped work: one interval of one scope and the partitions ``[first, last]``
  it covers (:class:`Unit`); an embedding shard adds its index in the plan, its rows and
  the plan's generation (:class:`Shard`), a selection group the replay's serving figures of
  its interval (:class:`SelectionGroup`);
- a mapped task's **result**: its unit under ``"unit"`` beside its figures
  (:meth:`Unit.result`, read back with :meth:`Unit.of_result`);
- a run record's **span**: the intervals a record covers (:func:`span`).

Each is a frozen dataclass whose ``to_json``/``from_json`` are the only code that spells its
keys; an interval's own keys are :meth:`~solaris.orchestration.layout.Interval.as_dict`'s.
Units are built by the planning tasks from checked settings, so ``from_json`` checks their
shape (a key missing or of the wrong type is a :class:`HandoffError` naming it), not their
meaning; a run's conf and its asset events, which people write, are checked in
:mod:`solaris.orchestration.runs`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from solaris.errors import SolarisError
from solaris.orchestration.layout import Interval

if TYPE_CHECKING:
    from solaris.config import SolarisConfig

__all__ = [
    "HandoffError",
    "Scope",
    "SelectionGroup",
    "Shard",
    "Unit",
    "results_in",
    "span",
]

U = TypeVar("U", bound="Unit")


class HandoffError(SolarisError, ValueError):
    """What a task was handed is not what its upstream task hands over."""


def _field(data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = data.get(key) if isinstance(data, Mapping) else None
    if not isinstance(value, kind) or (kind in (int, float) and isinstance(value, bool)):
        named = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise HandoffError(f"{what}: {key!r} missing or not {named}")
    return value


# The JSON type of each field a subclass adds (checked on the way in).
_JSON_KINDS: dict[str, type | tuple[type, ...]] = {
    "int": int,
    "str": str,
    "Mapping[str, Any]": Mapping,
}


@dataclass(frozen=True)
class Scope:
    """Whose work: a namespace, and whether its run replays history."""

    namespace: str
    replay: bool

    @classmethod
    def of(cls, cfg: SolarisConfig) -> Scope:
        return cls(cfg.namespace, cfg.replay)

    def to_json(self) -> dict[str, Any]:
        return {"namespace": self.namespace, "replay": self.replay}

    @classmethod
    def from_json(cls, data: Mapping[str, Any], what: str = "scope") -> Scope:
        return cls(_field(data, "namespace", str, what), _field(data, "replay", bool, what))


@dataclass(frozen=True)
class Unit:
    """One mapped task's work: an interval of a scope and its partitions ``[first, last]``."""

    scope: Scope
    interval: Interval
    partitions: tuple[int, int]

    # The key a mapped task's result holds its unit under (beside its figures).
    RESULT_KEY: ClassVar[str] = "unit"

    def to_json(self) -> dict[str, Any]:
        data = {
            **self.scope.to_json(),
            **self.interval.as_dict(),
            "partitions": list(self.partitions),
        }
        for f in self._own_fields():
            data[f.name] = getattr(self, f.name)
        return data

    @classmethod
    def from_json(cls: type[U], data: Mapping[str, Any]) -> U:
        what = cls.__name__
        try:
            interval = Interval.from_dict(data)
        except (KeyError, TypeError, ValueError) as exc:
            raise HandoffError(f"{what}: no interval ({exc})") from None
        partitions = _field(data, "partitions", (list, tuple), what)
        if len(partitions) != 2 or not all(
            isinstance(p, int) and not isinstance(p, bool) for p in partitions
        ):
            raise HandoffError(f"{what}: 'partitions' must be [first, last], got {partitions!r}")
        extra = {
            f.name: _field(data, f.name, _JSON_KINDS[str(f.type)], what) for f in cls._own_fields()
        }
        return cls(Scope.from_json(data, what), interval, (partitions[0], partitions[1]), **extra)

    @classmethod
    def _own_fields(cls) -> tuple[dataclasses.Field[Any], ...]:
        """The fields a subclass adds to a unit's (serialised under their own names)."""
        return dataclasses.fields(cls)[len(dataclasses.fields(Unit)) :]

    @property
    def partition_range(self) -> range:
        return range(self.partitions[0], self.partitions[1] + 1)

    def result(self, figures: Mapping[str, Any]) -> dict[str, Any]:
        """A mapped task's result: its figures and, under :attr:`RESULT_KEY`, this unit."""
        return {**figures, self.RESULT_KEY: self.to_json()}

    @classmethod
    def of_result(cls: type[U], result: Mapping[str, Any]) -> U:
        """The unit a mapped task's :meth:`result` was for."""
        return cls.from_json(_field(result, cls.RESULT_KEY, Mapping, f"{cls.__name__} result"))


@dataclass(frozen=True)
class Shard(Unit):
    """An embedding shard: its index in the plan, its rows, and the plan's generation."""

    index: int
    rows: int
    generation: str


@dataclass(frozen=True)
class SelectionGroup(Unit):
    """A group of partitions selected by one mapped task, with its interval's serving
    figures (a replay's: the prepare task served the interval's requests)."""

    served: Mapping[str, Any]


def results_in(scope: Scope, results: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The mapped results whose unit is of ``scope``'s namespace (a run may carry several
    namespaces' units: each namespace's work stays its own)."""
    return [r for r in results if Unit.of_result(r).scope.namespace == scope.namespace]


def span(intervals: Sequence[Interval]) -> dict[str, Any]:
    """A run record's intervals: the bounds of all of them, and each one."""
    if not intervals:
        raise HandoffError("a run record covers at least one interval")
    bounds = Interval(min(i.start for i in intervals), max(i.end for i in intervals))
    return {**bounds.as_dict(), "intervals": [i.as_dict() for i in intervals]}
