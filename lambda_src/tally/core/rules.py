"""Counter rules: which counters an event item adds to, and what it adds. No I/O.

Real tables hold orders, jobs and page views in their own shape. A rule names
its counter with a template over item attributes (``jobs/{providerId}``, or a
constant ``views/all``), may require conditions on the item (``when``), may
add up a numeric attribute alongside the count (``sum``), may keep the
distribution of a numeric attribute for quantiles (``histogram``, see
histograms.py) and may count the distinct values of an attribute
(``distinct``, see sketches.py). Rules come as JSON in
TALLY_RULES; with none, the one rule is the classic one: the counter named by
the counter attribute.

    [{"name": "jobs", "counter": "jobs/{providerId}"},
     {"name": "revenue", "counter": "revenue/{shop}", "when": {"status": {"equals": "paid"}}, "sum": "amount"},
     {"name": "load", "counter": "load/{page}", "sum": "loadMs", "histogram": "loadMs", "distinct": "clientId"}]

A rule works on an item's decoded attribute values, so stream records and
exported items (plain or DynamoDB JSON) go through the same rules.

By default a rule counts inserts. It may count a transition instead
(``becomes``: conditions that hold on the new image and did not on the old
one), or deletions (``"on": "REMOVE"``, judged on the old image, those made by
TTL told apart by the record's user identity), and may take its event time
from an attribute of its own or from the record's arrival (``time``):

    {"name": "done", "counter": "done/{providerId}", "becomes": {"status": {"equals": "done"}}, "time": "doneAt"}
    {"name": "expired", "counter": "sessions/expired", "on": "REMOVE", "deletedBy": "ttl", "time": "@arrival"}

A rule may watch the counters it writes with threshold alerts (``alerts``, see alerts.py).

Rules change on a live table. A rule may count from an instant of its own
(``countFrom``: records arriving earlier are left to a backfill of its history)
and be retired at another (``retiredAt``: records arriving then or later are
not counted by it, and reads say its counters will not move again):

    {"name": "refunds", "counter": "refunds/{shop}", "countFrom": "2026-11-23T10:00:00Z"}
    {"name": "orders", "counter": "orders/{shop}", "retiredAt": "2026-12-01T00:00:00Z"}
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NamedTuple

from tally.core.alerts import AlertsError, parse_alerts
from tally.core.amounts import InvalidAmount, units_of
from tally.core.histograms import InvalidValue, bin_of
from tally.core.instants import InvalidInstant, whole_second_ms
from tally.core.sketches import InvalidValue as InvalidDistinct
from tally.core.sketches import hash_of

ENV_RULES = "TALLY_RULES"
MAX_COUNTER_LENGTH = 255
RESERVED_PREFIX = "#"
MAX_RULES = 25
MAX_RULE_NAME_LENGTH = 64
MAX_ONE_OF_VALUES = 100
_RULE_FIELDS = frozenset(
    {
        "name", "counter", "when", "sum", "histogram", "distinct", "becomes", "on", "time", "deletedBy", "alerts",
        "countFrom", "retiredAt",
    }
)
# Aggregates a rule may add beside the count: each an attribute name; rules writing one counter template must agree.
_AGGREGATES = {
    "sum": "sum, or neither, or its average would mix them",
    "histogram": "keep a histogram, or neither, or its quantiles would miss events",
    "distinct": "count distinct values, or neither, or its distinct count would miss events",
}
_CONDITION_KINDS = ("equals", "oneOf", "exists")
_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]*")

# Record kinds, as a stream record's eventName spells them.
INSERT, MODIFY, REMOVE = "INSERT", "MODIFY", "REMOVE"
RECORD_KINDS = (INSERT, MODIFY, REMOVE)
INSERTS_ONLY = frozenset({INSERT})
# A transition may happen when an item is written first or changed; a deletion has no new image.
TRANSITION_KINDS = frozenset({INSERT, MODIFY})
# The event time of a rule with "time": "@arrival": the record's ApproximateCreationDateTime.
ARRIVAL = "@arrival"
# Who made a deletion, for REMOVE rules: DynamoDB's TTL process, a request (DeleteItem, ...), or either.
DELETED_BY = ("any", "ttl", "user")
# Stream views: which of them carry each image.
NEW_IMAGE, OLD_IMAGE, NEW_AND_OLD_IMAGES = "NEW_IMAGE", "OLD_IMAGE", "NEW_AND_OLD_IMAGES"


class RulesError(ValueError):
    """Rules tally cannot apply; the message names the rule and the field."""


class InvalidCounter(ValueError):
    """A counter name tally will not store."""


class Unreadable:
    """Stands for an attribute value that could not be decoded."""

    def __repr__(self) -> str:
        return "UNREADABLE"


UNREADABLE = Unreadable()


def validate_counter(name: object) -> str:
    """Return ``name`` if it can be a counter; raise InvalidCounter saying why.

    Names starting with '#' are reserved for bookkeeping items (segment markers,
    rejection counters), so no event can write into them.
    """
    if not isinstance(name, str):
        raise InvalidCounter(f"counter must be a string, got {type(name).__name__}")
    if not name:
        raise InvalidCounter("counter is empty")
    if len(name) > MAX_COUNTER_LENGTH:
        raise InvalidCounter(f"counter longer than {MAX_COUNTER_LENGTH} characters")
    if name.startswith(RESERVED_PREFIX):
        raise InvalidCounter(f"counter starts with reserved {RESERVED_PREFIX!r}")
    if not name.isascii():
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidCounter("counter is not valid UTF-8") from None
    return name


class Template:
    """A counter name with ``{attribute}`` placeholders; ``{{`` and ``}}`` are literal braces."""

    def __init__(self, text: str, parts: tuple[tuple[bool, str], ...] | None = None) -> None:
        self.text = text
        self.parts = _parse_template(text) if parts is None else parts  # (is placeholder, literal or attribute)
        self.attributes = tuple(dict.fromkeys(name for is_name, name in self.parts if is_name))
        # The classic rule and many others are one placeholder: rendered without assembling pieces.
        self._whole = self.parts[0][1] if len(self.parts) == 1 and self.parts[0][0] else None
        self._pattern = re.compile(
            "".join("(.+)" if is_name else re.escape(literal) for is_name, literal in self.parts), re.DOTALL
        )

    def render(self, values: Mapping[str, Any], strings_only: bool = False) -> str:
        """The counter name for an item; raises KeyError for a missing attribute, InvalidCounter otherwise."""
        if self._whole is not None:
            return validate_counter(_text_of(self._whole, values[self._whole], strings_only))
        pieces = []
        for is_name, part in self.parts:
            if not is_name:
                pieces.append(part)
                continue
            value = values[part]
            pieces.append(_text_of(part, value, strings_only))
        return validate_counter("".join(pieces))

    def could_render(self, counter: str) -> bool:
        """Whether some item could make this template render ``counter``."""
        return self._pattern.fullmatch(counter) is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Template) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Template({self.text!r})"


def _parse_template(text: str) -> tuple[tuple[bool, str], ...]:
    parts: list[tuple[bool, str]] = []
    literal: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char in "{}" and text[index : index + 2] == char * 2:
            literal.append(char)
            index += 2
        elif char == "{":
            end = text.find("}", index)
            name = text[index + 1 : end] if end > 0 else ""
            if end < 0 or not name or "{" in name:
                raise ValueError(f"unclosed or empty placeholder at position {index}")
            if literal:
                parts.append((False, "".join(literal)))
                literal = []
            if parts and parts[-1][0]:
                raise ValueError(f"placeholders {{{parts[-1][1]}}} and {{{name}}} need a separator between them")
            parts.append((True, name))
            index = end + 1
        elif char == "}":
            raise ValueError(f"unmatched '}}' at position {index} (write '}}}}' for a literal brace)")
        else:
            literal.append(char)
            index += 1
    if literal:
        parts.append((False, "".join(literal)))
    return tuple(parts)


def _text_of(attribute: str, value: Any, strings_only: bool) -> str:
    if type(value) is str:
        if not value:
            raise InvalidCounter(f"attribute {attribute!r} is an empty string")
        return value
    if strings_only:
        raise InvalidCounter(f"counter must be a string, got {_kind(value)}")
    if type(value) is int:
        return str(value)
    if type(value) is Decimal and value.is_finite():
        return _plain_number(value)
    raise InvalidCounter(f"attribute {attribute!r} is {_kind(value)}, not a string or a number")


def _plain_number(number: Decimal) -> str:
    """One text per number, as DynamoDB normalizes them: 5, 5.0 and 5E0 all render as 5."""
    if number == number.to_integral_value():
        return str(int(number))
    return format(number.normalize(), "f")


def _kind(value: Any) -> str:
    if value is UNREADABLE:
        return "unreadable"
    if value is None:
        return "null"
    return type(value).__name__


@dataclass(frozen=True)
class Condition:
    """One requirement on an item attribute: equals a value, is one of some values, exists or not."""

    attribute: str
    kind: str  # one of _CONDITION_KINDS
    values: tuple[Any, ...] = ()
    exists: bool = True

    def holds(self, values: Mapping[str, Any]) -> bool:
        present = self.attribute in values
        if self.kind == "exists":
            return present == self.exists
        if not present:
            return False
        value = values[self.attribute]
        return any(_same(value, wanted) for wanted in self.values)


def _same(value: Any, wanted: Any) -> bool:
    """Equality across types as a user means it: strings with strings, numbers with numbers, booleans alone."""
    if isinstance(wanted, bool) or isinstance(value, bool):
        return type(value) is type(wanted) and value == wanted
    if isinstance(wanted, str):
        return type(value) is str and value == wanted
    return isinstance(value, int | Decimal) and not isinstance(value, bool) and value == wanted


class Counted(NamedTuple):
    """A rule matched: add 1 to ``counter`` (and ``units`` to its sum, 1 to its histogram's ``bin``,
    the value ``hashed`` to its distinct values)."""

    rule: str | None
    counter: str
    units: int | None
    bin: str | None = None
    hashed: int | None = None


class Refused(NamedTuple):
    """A rule matched but cannot count the item; ``reason`` is a rejection reason's value."""

    rule: str | None
    reason: str
    detail: str


@dataclass(frozen=True)
class Rule:
    """One counter rule. ``name`` is None only for the classic rule, so its logs stay as they were.

    ``on``: the record kinds it sees. ``becomes``: conditions that must hold on
    the new image and not (all of them) on the old one. ``time``: the attribute
    holding its event time, ARRIVAL for the record's arrival, None for the
    table-wide time attribute. ``deleted_by``: which deletions a REMOVE rule counts.
    """

    name: str | None
    counter: Template
    when: tuple[Condition, ...] = ()
    sum: str | None = None
    strings_only: bool = False
    becomes: tuple[Condition, ...] = ()
    on: frozenset[str] = INSERTS_ONLY
    time: str | None = None
    deleted_by: str = "any"
    histogram: str | None = None
    distinct: str | None = None
    alerts: tuple[Any, ...] = ()  # alerts.Alert: threshold alerts on the counters it writes
    count_from_ms: int | None = None  # counts records arriving at or after it (None: the deployment's countFrom)
    retired_ms: int | None = None  # counts no record arriving at or after it
    conditions: tuple[Condition, ...] = field(init=False, compare=False, repr=False)  # when, then becomes

    def __post_init__(self) -> None:
        object.__setattr__(self, "conditions", self.when + self.becomes)

    @property
    def attributes(self) -> tuple[str, ...]:
        """Every attribute the rule reads."""
        names = [*self.counter.attributes, *(c.attribute for c in self.when), *(c.attribute for c in self.becomes)]
        names.extend(name for name in (self.sum, self.histogram, self.distinct) if name)
        if self.time and self.time != ARRIVAL:
            names.append(self.time)
        return tuple(dict.fromkeys(names))

    @property
    def needs_new_image(self) -> bool:
        return bool(self.on & TRANSITION_KINDS)

    @property
    def needs_old_image(self) -> bool:
        """A deletion is judged on the old image; a change is a transition only against it."""
        return REMOVE in self.on or (bool(self.becomes) and MODIFY in self.on)

    def counts_deletion(self, by_ttl: bool) -> bool:
        """Whether this rule counts a REMOVE made by TTL (``by_ttl``) or by a request."""
        return REMOVE in self.on and (self.deleted_by == "any" or (self.deleted_by == "ttl") == by_ttl)

    def counts_arrival(self, arrival_ms: int) -> bool:
        """Whether a record arriving at ``arrival_ms`` is this rule's to count: between its countFrom and retirement."""
        if self.count_from_ms is not None and arrival_ms < self.count_from_ms:
            return False
        return self.retired_ms is None or arrival_ms < self.retired_ms

    def retired_by(self, now_ms: int) -> bool:
        """Whether the rule has stopped counting by ``now_ms``."""
        return self.retired_ms is not None and self.retired_ms <= now_ms

    def held_before(self, old: Mapping[str, Any]) -> bool:
        """Whether the old image already met ``becomes``: then a change is no transition."""
        return all(condition.holds(old) for condition in self.becomes)

    def matches(self, values: Mapping[str, Any]) -> bool:
        """Whether ``when`` and ``becomes`` hold on the image the rule judges."""
        for condition in self.conditions:
            if not condition.holds(values):
                return False
        return True

    def apply(self, values: Mapping[str, Any]) -> Counted | Refused | None:
        """What this rule makes of an item's decoded attributes; None when its conditions do not hold."""
        if not self.matches(values):
            return None
        return self.count(values)

    def count(self, values: Mapping[str, Any]) -> Counted | Refused:
        """The counter and amount for an image the rule counts, or why it cannot count it."""
        try:
            counter = self.counter.render(values, self.strings_only)
        except KeyError as missing:
            return Refused(self.name, "missing_counter", f"{self._label}no attribute {missing.args[0]!r}")
        except InvalidCounter as error:
            return Refused(self.name, "invalid_counter", f"{self._label}{error}")
        if self.sum is None and self.histogram is None and self.distinct is None:
            return Counted(self.name, counter, None)
        units = bin = hashed = None
        if self.sum is not None:
            if self.sum not in values:
                return Refused(self.name, "missing_sum", f"{self._label}no attribute {self.sum!r} to sum")
            try:
                units = units_of(values[self.sum])
            except InvalidAmount as error:
                return Refused(self.name, "invalid_sum", f"{self._label}{self.sum!r}: {error}")
        if self.histogram is not None:
            if self.histogram not in values:
                detail = f"{self._label}no attribute {self.histogram!r} for the histogram"
                return Refused(self.name, "missing_histogram", detail)
            try:
                bin = bin_of(values[self.histogram])
            except InvalidValue as error:
                return Refused(self.name, "invalid_histogram", f"{self._label}{self.histogram!r}: {error}")
        if self.distinct is not None:
            if self.distinct not in values:
                detail = f"{self._label}no attribute {self.distinct!r} to count distinct values of"
                return Refused(self.name, "missing_distinct", detail)
            try:
                hashed = hash_of(values[self.distinct])
            except InvalidDistinct as error:
                return Refused(self.name, "invalid_distinct", f"{self._label}{self.distinct!r}: {error}")
        return Counted(self.name, counter, units, bin, hashed)

    @property
    def _label(self) -> str:
        return f"rule {self.name!r}: " if self.name else ""

    @property
    def label(self) -> str:
        """How messages name the rule."""
        return f"rule {self.name!r}" if self.name else "the classic rule"


@dataclass(frozen=True)
class Rules:
    """The rules every item goes through, in order; each matching rule adds to its counter."""

    rules: tuple[Rule, ...]
    text: str = field(default="", compare=False, repr=False)  # the JSON they were read from ("" for the classic rule)
    attributes: tuple[str, ...] = field(init=False, compare=False, repr=False)  # every attribute the rules read

    kinds: frozenset[str] = field(init=False, compare=False, repr=False)  # the record kinds some rule sees
    seeing: dict[str, tuple[Rule, ...]] = field(init=False, compare=False, repr=False)  # kind -> rules that see it
    timed: bool = field(init=False, compare=False, repr=False)  # some rule has a countFrom or retiredAt of its own

    def __post_init__(self) -> None:
        # Computed once: every record reads these attributes and goes through the rules of its kind.
        names = tuple(dict.fromkeys(name for rule in self.rules for name in rule.attributes))
        object.__setattr__(self, "attributes", names)
        object.__setattr__(self, "kinds", frozenset(kind for rule in self.rules for kind in rule.on))
        seeing = {kind: tuple(rule for rule in self.rules if kind in rule.on) for kind in RECORD_KINDS}
        object.__setattr__(self, "seeing", seeing)
        timed = any(rule.count_from_ms is not None or rule.retired_ms is not None for rule in self.rules)
        object.__setattr__(self, "timed", timed)

    @property
    def classic(self) -> bool:
        return len(self.rules) == 1 and self.rules[0].name is None

    @property
    def stream_view(self) -> str:
        """The stream view that carries every image the rules judge (NEW_IMAGE when no rule needs the old one)."""
        new = any(rule.needs_new_image for rule in self.rules)
        old = any(rule.needs_old_image for rule in self.rules)
        if old:
            return NEW_AND_OLD_IMAGES if new else OLD_IMAGE
        return NEW_IMAGE

    def view_shortfall(self, view: str) -> str | None:
        """Why a stream of ``view`` cannot feed these rules (the first rule it fails, and what it needs), or None."""
        carries_new = view in (NEW_IMAGE, NEW_AND_OLD_IMAGES)
        carries_old = view in (OLD_IMAGE, NEW_AND_OLD_IMAGES)
        for rule in self.rules:
            new, old = rule.needs_new_image, rule.needs_old_image
            if (new and not carries_new) or (old and not carries_old):
                if new and old:
                    needed, why = NEW_AND_OLD_IMAGES, "judges changes against the old image"
                elif old:
                    needed, why = f"{OLD_IMAGE} or {NEW_AND_OLD_IMAGES}", "judges deletions on the old image"
                else:
                    needed, why = f"{NEW_IMAGE} or {NEW_AND_OLD_IMAGES}", "reads each new item"
                return f"{rule.label} {why}, so the view must be {needed}"
        return None

    def named(self, names: Iterable[str]) -> Rules:
        """Only the rules of these names, in their order (what a backfill of their history counts with)."""
        wanted = list(dict.fromkeys(names))
        known = {rule.name for rule in self.rules}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            listed = ", ".join(repr(rule.name) for rule in self.rules if rule.name)
            raise RulesError(f"no rule named {unknown[0]!r}; the rules are {listed or 'the classic rule alone'}")
        return Rules(tuple(rule for rule in self.rules if rule.name in wanted))

    def retired_at(self, counter: str, now_ms: int) -> int | None:
        """When ``counter`` stopped counting: every rule that can write it retired by ``now_ms`` (the last of
        them retired then); None while one of them counts, or when no rule can write it."""
        writers = self.writers(counter)
        if not writers or not all(rule.retired_by(now_ms) for rule in writers):
            return None
        return max(rule.retired_ms for rule in writers)  # type: ignore[type-var]

    def writers(self, counter: str) -> tuple[Rule, ...]:
        """The rules that can write ``counter`` (``Template.could_render``), in their order."""
        return tuple(rule for rule in self.rules if rule.counter.could_render(counter))

    def sums(self, counter: str) -> bool:
        """Whether a summing rule can write ``counter`` (the query then reports its sum and average)."""
        return any(rule.sum and rule.counter.could_render(counter) for rule in self.rules)

    def keeps_histogram(self, counter: str) -> bool:
        """Whether a histogram rule can write ``counter`` (the query can then answer its quantiles)."""
        return any(rule.histogram and rule.counter.could_render(counter) for rule in self.rules)

    def counts_distinct(self, counter: str) -> bool:
        """Whether a distinct rule can write ``counter`` (the query then reads it by a union plan)."""
        return any(rule.distinct and rule.counter.could_render(counter) for rule in self.rules)


def classic_rules(counter_attribute: str) -> Rules:
    """Today's behaviour without TALLY_RULES: the counter attribute names the counter, which must be a string."""
    template = Template("{" + counter_attribute + "}", parts=((True, counter_attribute),))
    return Rules((Rule(None, template, strings_only=True),))


def parse_rules(text: str) -> Rules:
    """Rules from their JSON; RulesError names the rule (number and name) and the field at fault."""
    try:
        raw = json.loads(text, parse_float=Decimal, parse_int=Decimal, parse_constant=_no_constant)
    except (ValueError, RecursionError) as error:
        raise RulesError(f"not valid JSON: {error}") from None
    if not isinstance(raw, list) or not raw:
        raise RulesError("must be a non-empty JSON list of rules")
    if len(raw) > MAX_RULES:
        raise RulesError(f"holds {len(raw)} rules, at most {MAX_RULES}: each adds buckets to every event")
    rules = tuple(_rule(index, entry) for index, entry in enumerate(raw, start=1))
    seen: dict[str, int] = {}
    for index, rule in enumerate(rules, start=1):
        assert rule.name is not None
        if rule.name in seen:
            raise RulesError(f"rule {index} ({rule.name!r}): field 'name': same name as rule {seen[rule.name]}")
        seen[rule.name] = index
    alert_rules: dict[str, int] = {}
    for index, rule in enumerate(rules, start=1):
        for alert in rule.alerts:
            if alert.name in alert_rules:
                raise RulesError(
                    f"rule {index} ({rule.name!r}): field 'alerts': alert {alert.name!r} is also an alert of "
                    f"rule {alert_rules[alert.name]}: alert names are unique across rules"
                )
            alert_rules[alert.name] = index
    by_template: dict[str, Rule] = {}
    for index, rule in enumerate(rules, start=1):
        other = by_template.setdefault(rule.counter.text, rule)
        for aggregate, agreement in _AGGREGATES.items():
            if bool(getattr(other, aggregate)) != bool(getattr(rule, aggregate)):
                raise RulesError(
                    f"rule {index} ({rule.name!r}): field {aggregate!r}: counter {rule.counter.text!r} is also "
                    f"written by rule {other.name!r}; both must {agreement}"
                )
    return Rules(rules, text.strip())


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _rule(index: int, entry: Any) -> Rule:
    where = f"rule {index}"
    if not isinstance(entry, dict):
        raise RulesError(
            f"{where}: must be a JSON object with 'counter' (and 'name', 'when', 'sum', 'histogram', 'distinct', "
            "'becomes', ...)"
        )
    if isinstance(entry.get("name"), str):
        where = f"rule {index} ({entry['name']!r})"
    unknown = sorted(set(entry) - _RULE_FIELDS)
    if unknown:
        raise RulesError(f"{where}: field {unknown[0]!r}: unknown; a rule has {', '.join(sorted(_RULE_FIELDS))}")

    counter_text = entry.get("counter")
    if not isinstance(counter_text, str) or not counter_text:
        raise RulesError(f"{where}: field 'counter': must be a non-empty template string, got {_short(counter_text)}")
    try:
        template = Template(counter_text)
    except ValueError as error:
        raise RulesError(f"{where}: field 'counter': {error}") from None
    if not template.attributes:
        try:
            validate_counter(counter_text.replace("{{", "{").replace("}}", "}"))
        except InvalidCounter as error:
            raise RulesError(f"{where}: field 'counter': {error}") from None
    elif not template.parts[0][0] and template.parts[0][1].startswith(RESERVED_PREFIX):
        raise RulesError(f"{where}: field 'counter': starts with reserved {RESERVED_PREFIX!r}")
    literal_length = sum(len(part) for is_name, part in template.parts if not is_name) + len(template.attributes)
    if literal_length > MAX_COUNTER_LENGTH:
        raise RulesError(f"{where}: field 'counter': renders longer than {MAX_COUNTER_LENGTH} characters")

    name = entry.get("name", counter_text)
    if not isinstance(name, str) or len(name) > MAX_RULE_NAME_LENGTH or not _NAME_PATTERN.fullmatch(name):
        if "name" in entry:
            raise RulesError(
                f"{where}: field 'name': must be 1-{MAX_RULE_NAME_LENGTH} letters, digits or _.:/- "
                f"starting with a letter or digit, got {_short(name)}"
            )
        name = f"rule-{index}"  # a template is no name: {…} and long texts make poor metric dimensions

    when = _conditions(where, entry.get("when", {}))
    for key in _AGGREGATES:
        attribute = entry.get(key)
        if attribute is not None and (not isinstance(attribute, str) or not attribute):
            raise RulesError(f"{where}: field {key!r}: must be an attribute name, got {_short(attribute)}")
    becomes = _becomes(where, entry)
    on = _on(where, entry, becomes)
    return Rule(
        name,
        template,
        when,
        entry.get("sum"),
        becomes=becomes,
        on=on,
        time=_time(where, entry),
        deleted_by=_deleted_by(where, entry, on),
        histogram=entry.get("histogram"),
        distinct=entry.get("distinct"),
        alerts=_alerts(where, entry, name),
        **_lifetime(where, entry),
    )


def _lifetime(where: str, entry: dict[str, Any]) -> dict[str, int | None]:
    """``countFrom`` and ``retiredAt``: whole-second instants bounding the arrivals the rule counts."""
    instants: dict[str, int | None] = {}
    for key, field_name in (("countFrom", "count_from_ms"), ("retiredAt", "retired_ms")):
        raw = entry.get(key)
        if raw is None:
            instants[field_name] = None
            continue
        if isinstance(raw, bool) or not isinstance(raw, str | Decimal):
            raise RulesError(f"{where}: field {key!r}: must be an instant, ISO-8601 with an offset or epoch seconds, "
                             f"got {_short(raw)}")
        try:
            instants[field_name] = whole_second_ms(str(raw))
        except InvalidInstant as error:
            raise RulesError(f"{where}: field {key!r}: {error}") from None
    start, end = instants["count_from_ms"], instants["retired_ms"]
    if start is not None and end is not None and end <= start:
        raise RulesError(f"{where}: field 'retiredAt': must be after its countFrom")
    return instants


def _alerts(where: str, entry: dict[str, Any], rule: str) -> tuple[Any, ...]:
    """``alerts``: threshold alerts on the rule's counters (alerts.py)."""
    if "alerts" not in entry:
        return ()
    try:
        return parse_alerts(entry["alerts"], rule)
    except AlertsError as error:
        raise RulesError(f"{where}: field 'alerts': {error}") from None


def _becomes(where: str, entry: dict[str, Any]) -> tuple[Condition, ...]:
    """``becomes``: conditions as in ``when``, at least one, that a transition makes hold."""
    if "becomes" not in entry:
        return ()
    conditions = _conditions(where, entry["becomes"], "becomes")
    if not conditions:
        raise RulesError(f"{where}: field 'becomes': needs at least one condition, as in 'when'")
    return conditions


def _on(where: str, entry: dict[str, Any], becomes: tuple[Condition, ...]) -> frozenset[str]:
    """``on``: a record kind or a list of them; by default inserts, or inserts and changes for a transition."""
    if "on" not in entry:
        return TRANSITION_KINDS if becomes else INSERTS_ONLY
    raw = entry["on"]
    kinds = [raw] if isinstance(raw, str) else raw
    if not isinstance(kinds, list) or not kinds or any(kind not in RECORD_KINDS for kind in kinds):
        raise RulesError(
            f"{where}: field 'on': must be one of {', '.join(RECORD_KINDS)} or a list of them, got {_short(raw)}"
        )
    if len(set(kinds)) != len(kinds):
        raise RulesError(f"{where}: field 'on': names a record kind twice: {_short(raw)}")
    if becomes and REMOVE in kinds:
        raise RulesError(f"{where}: field 'on': a 'becomes' rule cannot see REMOVE: a deletion has no new image")
    return frozenset(kinds)


def _time(where: str, entry: dict[str, Any]) -> str | None:
    """``time``: the attribute stamping the rule's events, or ARRIVAL; None for the table-wide time attribute."""
    if "time" not in entry:
        return None
    raw = entry["time"]
    if not isinstance(raw, str) or not raw or (raw.startswith("@") and raw != ARRIVAL):
        raise RulesError(f"{where}: field 'time': must be an attribute name or {_short(ARRIVAL)}, got {_short(raw)}")
    return raw


def _deleted_by(where: str, entry: dict[str, Any], on: frozenset[str]) -> str:
    """``deletedBy``: which deletions a REMOVE rule counts: "any" (default), "ttl" or "user"."""
    if "deletedBy" not in entry:
        return "any"
    raw = entry["deletedBy"]
    if REMOVE not in on:
        raise RulesError(f"{where}: field 'deletedBy': only for a rule with \"on\": \"REMOVE\"")
    if raw not in DELETED_BY:
        raise RulesError(f"{where}: field 'deletedBy': must be one of {', '.join(DELETED_BY)}, got {_short(raw)}")
    return str(raw)


def _conditions(where: str, raw: Any, key: str = "when") -> tuple[Condition, ...]:
    if not isinstance(raw, dict):
        raise RulesError(f"{where}: field '{key}': must map attribute names to conditions, got {_short(raw)}")
    conditions = []
    for attribute, spec in raw.items():
        field = f"field '{key}.{attribute}'"
        if not attribute:
            raise RulesError(f"{where}: field '{key}': attribute names must not be empty")
        if not isinstance(spec, dict) or len(spec) != 1 or next(iter(spec)) not in _CONDITION_KINDS:
            raise RulesError(
                f"{where}: {field}: must be one of {{\"equals\": v}}, {{\"oneOf\": [v, ...]}}, "
                f"{{\"exists\": true|false}}, got {_short(spec)}"
            )
        [(kind, value)] = spec.items()
        if kind == "exists":
            if not isinstance(value, bool):
                raise RulesError(f"{where}: {field}: 'exists' must be true or false, got {_short(value)}")
            conditions.append(Condition(attribute, kind, exists=value))
            continue
        values = value if kind == "oneOf" else [value]
        if kind == "oneOf" and (not isinstance(value, list) or not 1 <= len(value) <= MAX_ONE_OF_VALUES):
            raise RulesError(f"{where}: {field}: 'oneOf' must be a list of 1-{MAX_ONE_OF_VALUES} values")
        for candidate in values:
            if not isinstance(candidate, str | bool | Decimal):
                raise RulesError(
                    f"{where}: {field}: compares with strings, numbers or booleans, got {_short(candidate)}"
                )
        conditions.append(Condition(attribute, kind, tuple(values)))
    return tuple(conditions)


def _short(value: Any) -> str:
    """A value as the JSON the user wrote (numbers keep their digits), cut to 80 characters."""
    text = _as_json(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _as_json(value: Any) -> str:
    """JSON text of a value parse_rules read: numbers were read as Decimals, which json cannot write as they came."""
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(key)}: {_as_json(item)}" for key, item in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_as_json(item) for item in value) + "]"
    return json.dumps(value)
