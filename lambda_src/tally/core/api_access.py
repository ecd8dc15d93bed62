"""The HTTP read API's routes and who may use them. No I/O.

Every route answers to requests signed with IAM (SigV4) by default. Public read
is off unless counter prefixes are configured: then ``/public/...`` routes
answer anonymous readers, for counters under those prefixes only (a blog that
shows view counts to its visitors), with a ``Cache-Control`` lifetime so
browsers and CDNs can absorb the traffic. The stack creates the public routes
only when prefixes are set; the function refuses them too when they are not,
so neither side alone can open a counter to the world.

The construct reads these names to create the routes; the function reads the
settings from its environment (``ApiSettings.from_env``), the construct writes
them (``ApiSettings.environment``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tally.core.rules import InvalidCounter, validate_counter
from tally.core.settings import SettingsError

COUNTS_PATH = "/counts"
COUNTERS_PATH = "/counters"
TOP_PATH = "/top"
ALERTS_PATH = "/alerts"
CALENDAR_PATH = "/calendar"
PUBLIC_PREFIX_PATH = "/public"
PUBLIC_COUNTS_PATH = PUBLIC_PREFIX_PATH + COUNTS_PATH
PUBLIC_COUNTERS_PATH = PUBLIC_PREFIX_PATH + COUNTERS_PATH
PUBLIC_TOP_PATH = PUBLIC_PREFIX_PATH + TOP_PATH
PUBLIC_CALENDAR_PATH = PUBLIC_PREFIX_PATH + CALENDAR_PATH
DASHBOARD_PATH = "/"
# The API's own description (OpenAPI 3), signed like the data it describes.
OPENAPI_PATH = "/openapi.json"
SIGNED_PATHS = (COUNTS_PATH, COUNTERS_PATH, TOP_PATH, CALENDAR_PATH, ALERTS_PATH, OPENAPI_PATH)
PUBLIC_PATHS = (PUBLIC_COUNTS_PATH, PUBLIC_COUNTERS_PATH, PUBLIC_TOP_PATH, PUBLIC_CALENDAR_PATH)

ENV_PUBLIC_PREFIXES = "TALLY_API_PUBLIC_PREFIXES"
ENV_PUBLIC_CACHE_SECONDS = "TALLY_API_PUBLIC_CACHE_SECONDS"
ENV_DASHBOARD = "TALLY_API_DASHBOARD"

MAX_PUBLIC_PREFIXES = 20
DEFAULT_PUBLIC_CACHE_SECONDS = 60
MAX_PUBLIC_CACHE_SECONDS = 86_400

ENV_NAMES = {
    "public_prefixes": ENV_PUBLIC_PREFIXES,
    "public_cache_seconds": ENV_PUBLIC_CACHE_SECONDS,
    "dashboard": ENV_DASHBOARD,
}


@dataclass(frozen=True)
class ApiSettings:
    """What the read function needs to know beyond the counting settings.

    ``public_prefixes``: counters starting with one of these may be read
    anonymously through the public routes; empty (the default) keeps public
    read off. ``dashboard``: serve the dashboard page at ``/``.
    """

    public_prefixes: tuple[str, ...] = ()
    public_cache_seconds: int = DEFAULT_PUBLIC_CACHE_SECONDS
    dashboard: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "public_prefixes", check_public_prefixes(self.public_prefixes))
        seconds = self.public_cache_seconds
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 <= seconds <= MAX_PUBLIC_CACHE_SECONDS:
            raise SettingsError(
                f"public cache lifetime must be a whole number of seconds from 0 to {MAX_PUBLIC_CACHE_SECONDS}, "
                f"got {seconds!r}",
                ("public_cache_seconds",),
            )

    @property
    def public_read(self) -> bool:
        return bool(self.public_prefixes)

    @property
    def paths(self) -> tuple[str, ...]:
        """The routes the stack creates for these settings (GET each): the signed ones, the public ones when
        public read is on, the dashboard when it is enabled."""
        return (*SIGNED_PATHS, *(PUBLIC_PATHS if self.public_read else ()), *((DASHBOARD_PATH,) if self.dashboard else ()))

    def is_public(self, counter: str) -> bool:
        """A counter anonymous readers may read."""
        return any(counter.startswith(prefix) for prefix in self.public_prefixes)

    @property
    def public_cache_control(self) -> str:
        return f"public, max-age={self.public_cache_seconds}"

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> ApiSettings:
        env = os.environ if env is None else env
        try:
            return cls(
                public_prefixes=_json_list(env.get(ENV_PUBLIC_PREFIXES, "")),
                public_cache_seconds=_whole(env.get(ENV_PUBLIC_CACHE_SECONDS, ""), DEFAULT_PUBLIC_CACHE_SECONDS),
                dashboard=env.get(ENV_DASHBOARD, "").strip().lower() in ("1", "true", "yes"),
            )
        except SettingsError as error:
            set_here = {field: f"{name}={env[name]!r}" for field, name in ENV_NAMES.items() if name in env}
            raise error.naming(set_here) from None

    def environment(self) -> dict[str, str]:
        """The function's environment that ``from_env`` reads back."""
        environment = {ENV_DASHBOARD: "true" if self.dashboard else "false"}
        if self.public_prefixes:
            environment[ENV_PUBLIC_PREFIXES] = json.dumps(list(self.public_prefixes), ensure_ascii=False)
            environment[ENV_PUBLIC_CACHE_SECONDS] = str(self.public_cache_seconds)
        return environment


def check_public_prefixes(prefixes: Sequence[str] | str) -> tuple[str, ...]:
    """Prefixes as given, or SettingsError: each one a counter name's beginning, no reserved name, no repeats."""
    if isinstance(prefixes, str) or not isinstance(prefixes, Sequence):
        raise SettingsError(f"public prefixes must be a list of strings, got {prefixes!r}", ("public_prefixes",))
    if len(prefixes) > MAX_PUBLIC_PREFIXES:
        raise SettingsError(f"at most {MAX_PUBLIC_PREFIXES} public prefixes, got {len(prefixes)}", ("public_prefixes",))
    for prefix in prefixes:
        try:
            validate_counter(prefix)
        except InvalidCounter as error:
            raise SettingsError(
                f"public prefix {prefix!r} cannot begin a counter name ({error}); "
                "give the start of the counters to publish, e.g. 'views/'",
                ("public_prefixes",),
            ) from None
    if len(set(prefixes)) != len(prefixes):
        raise SettingsError(f"public prefixes repeat: {list(prefixes)!r}", ("public_prefixes",))
    return tuple(prefixes)


def _json_list(raw: str) -> object:
    if not raw.strip():
        return []
    try:
        value = json.loads(raw)
    except ValueError:
        raise SettingsError(f"must be a JSON list of strings, got {raw!r}", ("public_prefixes",)) from None
    return value  # ApiSettings refuses anything but a list of prefixes


def _whole(raw: str, default: int) -> int:
    if not raw.strip():
        return default
    try:
        return int(raw)
    except ValueError:
        raise SettingsError(f"must be a whole number, got {raw!r}", ("public_cache_seconds",)) from None
