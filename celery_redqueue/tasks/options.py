"""What a redqueue task accepts: its own options at declaration, Celery's at each call
(docs/call-paths.md, "Decoration keywords" and "`apply_async` options").

A ``pool_*``, ``bucket_*`` or ``lease_*`` name that is no option of the task's kind is a
[`ConfigurationError`][celery_redqueue.ConfigurationError] with a "did you mean"; each of
Celery's ``apply_async`` options has a meaning for a stored call (`CALL_OPTIONS`,
`DRAIN_OPTIONS`) or is refused, naming it (`REFUSED_OPTIONS`): none is dropped silently.
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ConfigurationError, RedQueueError
from ..redis.keys import validate_name
from ..validation import optional_seconds, seconds

if TYPE_CHECKING:
    from typing import TypeAlias

    from celery import Celery

    #: A task's body as its class holds it: a function, or one stored as a staticmethod.
    Body: TypeAlias = Callable[..., object] | staticmethod[..., object]

#: The option prefixes that belong to redqueue task kinds.
PREFIXES = ("pool_", "bucket_", "lease_", "stream_")

#: Options a stored call uses itself.
CALL_OPTIONS = {
    "countdown": "holds the call in its structure until due (seconds)",
    "eta": "holds the call in its structure until that time",
    "dedupe_id": "names the call for producer-side dedupe",
    "task_id": "names the call: the receipt's id (and its result's, with per-call results)",
}

#: Options that go to the drain job this call sends, if it sends one (Celery's meaning there).
DRAIN_OPTIONS = {
    "queue": "routes the drain job this call sends",
    "routing_key": "routes the drain job this call sends",
    "exchange": "routes the drain job this call sends",
    "priority": (
        "the priority of the drain job this call sends (on a bucket with "
        "bucket_priority_bound: the call's tier)"
    ),
    "headers": "carried by the drain job this call sends",
    "producer": "sends the drain job this call sends",
    "connection": "sends the drain job this call sends",
    "serializer": "the broker serializer of the drain job (stored calls use redqueue_serializer)",
    "compression": "compresses the drain job's message",
    "retry": "retries sending the drain job (Celery's publish retry)",
    "retry_policy": "retries sending the drain job (Celery's publish retry)",
    "ignore_result": "whether the drain job stores its summary",
}

_NO_RESULT = "a pooled or bucket call runs later, inside a drain job, with no task result"

#: Options refused, with the reason and what to do instead.
REFUSED_OPTIONS = {
    "link": f"{_NO_RESULT} to pass on; call the follow-up task at the end of the body",
    "link_error": (
        f"{_NO_RESULT}; a failed call is counted and, with retries, dead-lettered "
        "(see the structure's stats and dead letters)"
    ),
    "shadow": "the worker runs a stored call inside a drain job, which has the task's own name",
    "expires": (
        "a stored call waits in its structure, not in the broker; a full pool sheds by "
        "pool_policy and a bucket key is bounded by bucket_max_depth"
    ),
    "time_limit": "limits apply to the drain job that runs many calls: set them on the task",
    "soft_time_limit": "limits apply to the drain job that runs many calls: set them on the task",
    "chain": f"chains: {_NO_RESULT} to pass on; call the next task from the body",
    "chord": f"chords: {_NO_RESULT} to join",
    "group_id": f"groups: {_NO_RESULT} to join; use add_many() to store many calls at once",
    "group_index": f"groups: {_NO_RESULT} to join; use add_many() to store many calls at once",
    "parent_id": f"canvas: {_NO_RESULT} to track",
    "root_id": f"canvas: {_NO_RESULT} to track",
    "reply_to": f"{_NO_RESULT} to reply with",
    "add_to_parent": f"{_NO_RESULT} to add to the calling task's children",
}


_RATE = (
    "rate_limit= would limit this task's drain jobs in each worker, not its calls (one drain "
    "job runs many calls)"
)

#: Celery task options a stored-call task (pool, bucket, stream) refuses at its declaration,
#: by kind, with what to use instead: Celery would apply them to the argument-less drain job
#: alone, so the calls would silently go without them.
REFUSED_TASK_OPTIONS: dict[str, dict[str, str]] = {
    "rate_limit": {
        "pool": f"{_RATE}: to release calls at a rate, use a bucket task (bucket_rate=...)",
        "bucket": f"{_RATE}: use bucket_rate= (per key) or bucket_total_rate= (all keys)",
        "stream": f"{_RATE}: to release work at a rate, use a bucket task (bucket_rate=...)",
    },
    "serializer": {
        kind: (
            "stored calls are encoded with the app's redqueue_serializer setting (JSON by "
            "default); serializer= would only apply to the argument-less drain job"
        )
        for kind in ("pool", "bucket", "stream")
    },
    "expires": {
        "pool": REFUSED_OPTIONS["expires"],
        "bucket": REFUSED_OPTIONS["expires"],
        "stream": "an entry waits in the stream, bounded by stream_maxlen, not in the broker",
    },
}


def check_task_options(cls: type, kind: str) -> None:
    """Refuse the Celery task options (`REFUSED_TASK_OPTIONS`) that ``cls`` sets itself."""
    for name, reasons in REFUSED_TASK_OPTIONS.items():
        if kind in reasons and vars(cls).get(name) is not None:
            raise ConfigurationError(
                f"{cls.__qualname__}: {name}={vars(cls)[name]!r} is refused on a {kind} task: "
                f"{reasons[kind]}"
            )


def drain_options(task_name: str, options: dict[str, object]) -> dict[str, object]:
    """Check a call's ``apply_async`` options; returns those meant for its drain job.

    Raises:
        RedQueueError: an option is refused or unknown, named in the message.
    """
    for name, value in options.items():
        if name in CALL_OPTIONS or name in DRAIN_OPTIONS:
            continue
        if name in REFUSED_OPTIONS:
            if value is None or (name == "chain" and not value):
                continue  # Celery passes some of these as None (or an empty chain)
            raise RedQueueError(
                f"{task_name}: apply_async({name}=...) is refused: {REFUSED_OPTIONS[name]}"
            )
        known = [*CALL_OPTIONS, *DRAIN_OPTIONS, *REFUSED_OPTIONS]
        raise RedQueueError(
            f"{task_name}: apply_async({name}=...) is not an option of a pooled or bucket call"
            + _did_you_mean(name, known)
        )
    return {k: v for k, v in options.items() if k in DRAIN_OPTIONS and v is not None}


def _did_you_mean(name: str, candidates: list[str]) -> str:
    close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


#: Keywords of Celery's task decorator that are no attribute of its Task class (they are
#: consumed by the decorator, by autoretry, or read by routing).
DECORATOR_KEYWORDS = frozenset(
    {
        "app",
        "base",
        "shared",
        "lazy",
        "filter",
        "autoretry_for",
        "dont_autoretry_for",
        "retry_kwargs",
        "retry_backoff",
        "retry_backoff_max",
        "retry_jitter",
        "queue",
        "exchange",
        "exchange_type",
        "routing_key",
        "pydantic",
        "pydantic_strict",
        "pydantic_context",
        "pydantic_dump_kwargs",
    }
)


def check_decoration_keywords(base: type, names: Iterable[str], kind: str) -> None:
    """Refuse decorator keywords that are neither Celery task options nor options of ``kind``
    (``@pool_task(size=10)``): Celery would set them on the class, where nothing reads them.

    Option names (`PREFIXES`) are checked by `check_option_names()`.
    """
    for name in names:
        if (
            name.startswith("_")
            or name.startswith(PREFIXES)
            or name in DECORATOR_KEYWORDS
            or hasattr(base, name)
        ):
            continue
        options = sorted(
            n for klass in base.__mro__ for n in vars(klass) if n.startswith(f"{kind}_")
        )
        prefixed = f"{kind}_{name}"
        hint = _did_you_mean(prefixed, options) or _did_you_mean(
            name, options + sorted(DECORATOR_KEYWORDS)
        )
        raise ConfigurationError(
            f"{name}= is neither a Celery task option nor an option of a {kind} task{hint}"
        )


def check_option_names(cls: type) -> None:
    """Refuse option names (`PREFIXES`) that are no option of ``cls``'s kind, classes that
    combine two kinds, and decorator keywords nothing reads."""
    kinds = {k.__dict__["redqueue_kind"] for k in cls.__mro__ if "redqueue_kind" in k.__dict__}
    if len(kinds) > 1:
        raise ConfigurationError(
            f"{cls.__qualname__} combines {' and '.join(sorted(kinds))} tasks: a task stores its "
            "calls in one structure; declare one task per structure"
        )
    if "redqueue_kind" in vars(cls):
        return  # the kind's own class declares its options
    check_task_options(cls, next(iter(kinds), "redqueue"))
    if cls.__dict__.get("_decorated"):
        # Made by Celery's decorator: every other name in the class dict is a keyword given.
        check_decoration_keywords(cls.__mro__[1], vars(cls), next(iter(kinds), "redqueue"))
    known = {name for klass in cls.__mro__[1:] for name in vars(klass) if name.startswith(PREFIXES)}
    for name in vars(cls):
        if not name.startswith(PREFIXES) or name in known:
            continue
        kind = next(iter(kinds), "redqueue")
        same = sorted(n for n in known if n.startswith(name.split("_", 1)[0] + "_"))
        raise ConfigurationError(
            f"{name} is not an option of a {kind} task"
            + _did_you_mean(name, sorted(known))
            + (f"; its options of that kind are: {', '.join(same)}" if same else "")
        )


#: The seconds options every kind with a drain has (``<kind>_<name>``), and whether 0 is refused.
DRAIN_SECONDS = {
    "drain_time_budget": True,
    "drain_lease": True,
    "visibility_timeout": True,
    "drain_linger": False,
    "processed_guard": False,
}


@dataclass(frozen=True)
class DrainSettings:
    """The options every kind with a drain has, read from the task's ``<kind>_*`` options by
    the kind's own class (``read_drain_settings``) and checked once (`read`): what the
    kind-blind code (the dispatch, the consumer, the watchdog, the results) reads, so that
    nothing looks an option up by the kind's name."""

    #: ``<kind>_drain_interval``: seconds between beat's drain jobs (None: no beat row).
    interval: float | None
    #: ``<kind>_drain_time_budget``, ``<kind>_drain_lease``, ``<kind>_visibility_timeout``,
    #: ``<kind>_drain_linger``, ``<kind>_processed_guard``: seconds.
    time_budget: float
    lease: float
    visibility_timeout: float
    linger: float
    processed_guard: float
    #: ``<kind>_drain_concurrency``: most drains of the structure at once (a stream group: 1).
    concurrency: int
    #: ``<kind>_results``: per-call results are stored.
    results: bool

    @classmethod
    def read(
        cls,
        prefix: str,
        *,
        interval: float | None,
        time_budget: float,
        lease: float,
        visibility_timeout: float,
        linger: float,
        processed_guard: float,
        concurrency: int | None = 1,
        results: bool = False,
    ) -> DrainSettings:
        """Check the values a kind's class declares (``PoolTask.read_drain_settings`` passes its
        ``pool_*`` attributes); `ConfigurationError` names the option as the user wrote it,
        ``<prefix>_<name>``. The prefix only names options: nothing is looked up by it."""
        given = {
            "drain_time_budget": time_budget,
            "drain_lease": lease,
            "visibility_timeout": visibility_timeout,
            "drain_linger": linger,
            "processed_guard": processed_guard,
        }
        values = {
            name: seconds(f"{prefix}_{name}", given[name], positive=positive)
            for name, positive in DRAIN_SECONDS.items()
        }
        return cls(
            interval=optional_seconds(f"{prefix}_drain_interval", interval),
            time_budget=values["drain_time_budget"],
            lease=values["drain_lease"],
            visibility_timeout=values["visibility_timeout"],
            linger=values["drain_linger"],
            processed_guard=values["processed_guard"],
            concurrency=max(1, int(concurrency or 1)),
            results=bool(results),
        )


def check_structure_name(cls: type, option: str, value: str | None) -> None:
    """The structure's name (``value``, the class's ``option``, or the task name it defaults
    to) is a valid key part."""
    if value is not None:
        validate_name(value, option)
        return
    task_name = cls.__dict__.get("name")
    if task_name is not None:
        validate_name(task_name, f"{option} (the task name, when {option} is not given)")


def function_or_name(
    cls: type, option: str, what: str = "a callable or an argument name"
) -> object:
    """Check an option given as a callable or a name (``bucket_key``, ``bucket_cost``: one of
    the body's arguments; ``stream_key``: a field of the event), set on ``cls`` itself; a
    callable is stored as a staticmethod (a plain function on the class would become a bound
    method). Returns the value, None if unset."""
    value = cls.__dict__.get(option)
    if value is None:
        return None
    if not (isinstance(value, str) or callable(value)):
        raise ConfigurationError(f"{option} must be {what}, got {value!r}")
    if callable(value) and not isinstance(value, staticmethod):
        setattr(cls, option, staticmethod(value))
    return value


def check_key_parameter(key: str, run: Body) -> None:
    """``bucket_key`` given as a name must be one of the body's named parameters."""
    body = run.__func__ if isinstance(run, staticmethod) else run
    try:
        parameters = inspect.signature(body).parameters.values()
    except (TypeError, ValueError):
        return  # no signature to read: the call site checks each call
    named = [p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if key not in named:
        raise ConfigurationError(
            f"bucket_key={key!r} is not a parameter of {getattr(body, '__name__', body)!r} "
            f"(its parameters: {', '.join(named) or 'none'})" + _did_you_mean(key, named)
        )


def check_debounce_options(
    prefix: str, debounce: object, max_wait: object, dedupe_key: object, count_kwarg: object
) -> None:
    """``<prefix>_debounce`` and its companions, as pools and buckets both take them: seconds
    each, a dedupe key to name the calls that collapse, the count's keyword an identifier."""
    seconds(f"{prefix}_debounce", debounce)
    seconds(f"{prefix}_debounce_max_wait", max_wait)
    if debounce and dedupe_key is None:
        raise ConfigurationError(
            f"{prefix}_debounce needs {prefix}_dedupe_key: a function of the call's arguments "
            "naming the calls that collapse"
        )
    if max_wait and not debounce:
        raise ConfigurationError(f"{prefix}_debounce_max_wait needs {prefix}_debounce (seconds)")
    if not isinstance(count_kwarg, str) or not count_kwarg.isidentifier():
        raise ConfigurationError(f"{prefix}_count_kwarg must be an identifier, got {count_kwarg!r}")


def check_count_parameter(option: str, kwarg: str, run: Body) -> None:
    """A body that gets the count of merged calls (``option`` on: coalescing, debounce) must
    take ``kwarg`` (or ``**kwargs``): else every run would fail with a TypeError."""
    body = run.__func__ if isinstance(run, staticmethod) else run
    try:
        parameters = inspect.signature(body).parameters.values()
    except (TypeError, ValueError):
        return  # no signature to read
    if any(p.kind is p.VAR_KEYWORD for p in parameters) or kwarg in (
        p.name for p in parameters if p.kind is not p.POSITIONAL_ONLY
    ):
        return
    raise ConfigurationError(
        f"{option}: {getattr(body, '__name__', body)!r} gets the count of the calls merged into "
        f"each run as {kwarg}=, but takes no {kwarg} parameter; add {kwarg}=1 to it"
    )


def warn_if_task_cls_dropped(cls: type, app: Celery) -> None:
    """Say so when ``@app.task(base=PoolTask, ...)`` replaced the app's own ``task_cls`` (as
    ``base=`` does in Celery for every task): what that class does per call, such as Flask's app
    context, does not happen for this task."""
    if not cls.__dict__.get("_decorated") or not cls.__dict__.get("name"):
        return
    task_cls = app.Task.__mro__[1]
    if task_cls.__module__ == "celery.app.task" or issubclass(cls, task_cls):
        return
    warnings.warn(
        f"{cls.__dict__['name']}: base={cls.__mro__[1].__name__} replaces the app's task_cls "
        f"{task_cls.__name__}, so its __call__ does not wrap this task's calls; use "
        f"@{getattr(cls, 'redqueue_kind', 'pool')}_task(app=app, ...), which builds on it, or "
        f"base=type('X', ({cls.__mro__[1].__name__}, app.Task), {{}})",
        UserWarning,
        stacklevel=2,
    )


def is_trigger(args: object, producer: object, options: dict[str, Any]) -> bool:
    """An argument-less call made by a scheduler or tool, meant as a drain trigger: Celery
    beat's scheduler (it passes ``producer=``, and decoded arguments, ``[]``), django-celery-beat
    (``periodic_task_name`` header) and Flower's apply endpoints (JSON-decoded ``args=[]``).
    A ``delay()``/``apply_async()`` in code passes a tuple or nothing."""
    headers = options.get("headers") or {}
    return isinstance(args, list) or producer is not None or "periodic_task_name" in headers
