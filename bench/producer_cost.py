"""What one producer call costs, beside its baselines from the same run (used by
``pool_bench.py`` and ``bucket_bench.py``; not run on its own).

The sides are timed over the same calls, interleaved in chunks (the order swapped every chunk)
so machine load weighs on all of them alike:

* the redqueue task's ``.delay()`` (one script call: ``pool_add`` or ``bucket_enqueue``);
* a plain Celery ``.delay()`` of a task with the same arguments (one LPUSH to the broker);
* a raw PING round trip through the same redis-py client (the issue's baseline: what any one
  redis-py command costs);
* a PING sent and read on a connection held from the same client's pool, without redis-py's
  command path (the physical limit of one call: redqueue's hot path runs its script this way);
* a raw one-command EVALSHA (a script that runs one ZADD) through the same client: what the
  smallest possible script call costs;
* a raw EVALSHA of the task's own script with the arguments a call sends (into a second
  structure of the same settings): the redqueue call without the Python around it.

Around each chunk (outside the timing) ``INFO commandstats`` is read, so each side gets its own
server time per script call (``usec`` / ``calls`` of ``cmdstat_evalsha``): the time Redis spent
inside the script, without the network and the Python client. Reports; never asserts.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from statistics import median
from typing import Any

#: The raw one-command EVALSHA baseline: one ZADD, like the smallest pool would do.
RAW_SCRIPT = "return redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])"
PING = "raw PING round trip"
CONN_PING = "PING on a held connection"
PACKED_PING = b"*1\r\n$4\r\nPING\r\n"
RAW = "raw one-command EVALSHA (ZADD)"
SCRIPT = "raw EVALSHA of the same script"


@dataclass
class Side:
    name: str
    calls: int = 0
    seconds: float = 0.0
    scripts: int = 0
    script_usec: int = 0
    #: Seconds per call of each round, in order (the rounds of every side run side by side).
    rounds: list[float] = field(default_factory=list)

    @property
    def usec_per_call(self) -> float:
        return self.seconds / self.calls * 1e6 if self.calls else float("nan")

    @property
    def rate(self) -> float:
        return self.calls / self.seconds if self.seconds else float("inf")

    @property
    def server_usec(self) -> float | None:
        """Server time per script call of this side (None: it ran no script)."""
        return self.script_usec / self.scripts if self.scripts else None


def _evalsha(client: Any) -> tuple[int, int]:
    stats = client.info("commandstats").get("cmdstat_evalsha") or {}
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def raw_sides(
    client: Any, key: str, payload: bytes, same_script: Callable[[int], Any] | None = None
) -> dict[str, Callable[[range], Any]]:
    """The raw baselines on ``client`` (the raw ZADD writes to ``key``; delete it after).

    ``same_script(i)`` runs the redqueue script once, bare (the :data:`SCRIPT` side).
    """
    sha = client.script_load(RAW_SCRIPT)

    def ping(chunk: range) -> None:
        for _ in chunk:
            client.ping()

    def raw(chunk: range) -> None:
        for i in chunk:
            client.evalsha(sha, 1, key, i, payload)

    pool = client.connection_pool
    conn = pool.get_connection()

    def conn_ping(chunk: range) -> None:
        for _ in chunk:
            conn.send_packed_command([PACKED_PING])
            conn.read_response()

    sides = {PING: ping, CONN_PING: conn_ping, RAW: raw}
    if same_script is not None:
        script = same_script

        def bare(chunk: range) -> None:
            for i in chunk:
                script(i)

        sides[SCRIPT] = bare
    return sides


def measure(
    client: Any, n: int, rounds: int, sides: dict[str, Callable[[range], Any]]
) -> dict[str, Side]:
    """Run every side over ``range(n)`` in ``rounds`` interleaved chunks."""
    out = {name: Side(name) for name in sides}
    step = max(1, -(-n // rounds))
    for number, start in enumerate(range(0, n, step)):
        chunk = range(start, min(n, start + step))
        names = list(sides) if number % 2 == 0 else list(reversed(sides))
        for name in names:
            calls_before, usec_before = _evalsha(client)
            began = time.perf_counter()
            sides[name](chunk)
            elapsed = time.perf_counter() - began
            calls_after, usec_after = _evalsha(client)
            side = out[name]
            side.calls += len(chunk)
            side.seconds += elapsed
            side.rounds.append(elapsed / len(chunk))
            side.scripts += calls_after - calls_before
            side.script_usec += usec_after - usec_before
    return out


def print_table(title: str, redqueue: str, plain: str, sides: dict[str, Side]) -> None:
    """One row per side: rate, time per call, the redqueue side's ratio to it, server time."""
    mine = sides[redqueue]
    header = ["side", "calls/s", "us/call", f"{redqueue.split()[0]} vs it", "server us/script"]
    rows = []
    for side in sides.values():
        ratio = "-" if side is mine else f"{mine.rate / side.rate:.2f}x"
        server = side.server_usec
        rows.append(
            [
                side.name,
                f"{side.rate:,.0f}",
                f"{side.usec_per_call:.1f}",
                ratio,
                "-" if server is None else f"{server:.1f}",
            ]
        )
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print()
    print(title)
    print()
    for cells in [header, ["-" * w for w in widths], *rows]:
        line = [cells[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)
        ]
        print("| " + " | ".join(line) + " |")
    print()
    ping, raw = sides[PING], sides[RAW]
    vs_plain = mine.rate / sides[plain].rate
    vs_ping = mine.rate / ping.rate
    print(
        f"targets: {redqueue} >= 3x {plain}: {vs_plain:.2f}x "
        f"{'yes' if vs_plain >= 3 else 'NO'}; >= 0.75x a raw PING round trip: {vs_ping:.2f}x "
        f"{'yes' if vs_ping >= 0.75 else 'NO'} (against a PING on a held connection, the "
        f"limit without redis-py's command path: {mine.rate / sides[CONN_PING].rate:.2f}x)"
    )
    # The same ratio round by round: a burst of load on the machine weighs on one round of one
    # side, so the spread says how far the whole-run ratio above can be trusted.
    per_round = [
        theirs / ours for ours, theirs in zip(mine.rounds, sides[plain].rounds, strict=True)
    ]
    if per_round:
        print(
            f"the same ratio round by round ({len(per_round)} rounds): median "
            f"{median(per_round):.2f}x, {min(per_round):.2f}x-{max(per_round):.2f}x; "
            f"{sum(r >= 3 for r in per_round)} of {len(per_round)} at 3x or more"
        )
    server = mine.server_usec or 0.0
    trip = sides[CONN_PING]
    line = (
        f"where a call's {mine.usec_per_call:.0f} us go: the round trip (a PING on a held "
        f"connection) {trip.usec_per_call:.0f} us, the script inside Redis {server:.0f} us"
    )
    bare = sides.get(SCRIPT)
    if bare is not None:
        line += (
            f", sending its arguments and waiting out the script beyond that "
            f"{bare.usec_per_call - trip.usec_per_call - server:.0f} us (the bare script call: "
            f"{bare.usec_per_call:.0f} us), redqueue's Python around the call "
            f"{mine.usec_per_call - bare.usec_per_call:.0f} us"
        )
    else:
        line += f", the rest {mine.usec_per_call - trip.usec_per_call - server:.0f} us"
    print(
        line + f"; redis-py's command path adds {ping.usec_per_call - trip.usec_per_call:.0f} us "
        f"to a PING; the smallest script call through it (one ZADD) takes "
        f"{raw.usec_per_call:.0f} us, {raw.server_usec or 0:.1f} us of it inside Redis."
    )
