"""One level over Ray actors, across machines: :class:`RayPool` (the coordinator's side).

Ray, the optional extra ``distributed``, starts the actors, carries the calls and reports
deaths; loadgen manages no cluster and imports Ray only when needed (:func:`import_ray`).
One async actor per worker hosts a :class:`~loadgen.load.runner.Runner` built from the
picklable :class:`~loadgen.load.share.WorkerSetup`; a level goes ``prepare``, ``start``,
then ``drain`` at least every ``flush_s``. No load is silently re-run (``max_restarts=0``,
``max_task_retries=0``): a lost actor's last-drained in-flight requests become
``worker_lost`` records. Each node's clock offset comes from the lowest-round-trip ping
and converts the actor's times to the coordinator's clock.

docs/architecture.md, "How a level is sent" → "Ray actors", has the level's steps, what
loses an actor, and the offset's estimate and what it touches.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
import logging
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from loadgen.errors import ConfigError, TargetError, Terminated
from loadgen.load.agent import TaskSource
from loadgen.load.precision import LevelWatch
from loadgen.load.runner import LevelPlan, LevelResult, Runner
from loadgen.load.sessions import SessionSource
from loadgen.load.share import START_LEAD_NS, LevelCollector, ShareDone, WorkerSetup, run_share
from loadgen.load.source import SpecSource
from loadgen.records import RequestRecord

__all__ = ["PINGS", "ClockOffset", "RayCluster", "RayPool", "connect", "import_ray"]

_now = time.perf_counter_ns
PINGS = 8  # clock pings per actor and estimate


def import_ray() -> Any:
    """The ``ray`` module, or a one-line error saying how to install it."""
    try:
        return importlib.import_module("ray")
    except ImportError:
        raise ConfigError("Ray is not installed: pip install 'loadgen[distributed]'", field="ray") from None


@dataclass(frozen=True, slots=True)
class RayCluster:
    """The cluster a run joined: live nodes, their CPUs, their addresses."""

    nodes: int
    cpus: int
    addresses: list[str]


@contextlib.contextmanager
def connect(address: str) -> Iterator[RayCluster]:
    """Ray for one run. ``"auto"``: the cluster in ``RAY_ADDRESS`` or the one ``ray start``
    began on this machine, else a local instance started for the run; anything else: a
    cluster's address (``HOST:PORT``, ``ray://HOST:PORT``). At the end the driver
    disconnects (a local instance stops). When Ray is initialised already (a test, a
    notebook), its connection is used as it is and left open."""
    ray = import_ray()
    owned = not ray.is_initialized()
    if owned:
        quiet: dict[str, Any] = {"logging_level": logging.ERROR, "log_to_driver": False}
        try:
            try:
                ray.init(address=address, **quiet)
            except ConnectionError:
                if address != "auto":
                    raise
                ray.init(include_dashboard=False, **quiet)  # no cluster to join: a local one
        except (ConnectionError, RuntimeError, ValueError) as exc:
            raise TargetError(f"cannot join the Ray cluster at {address}: {exc}") from exc
        except SystemExit as exc:  # ray.init's own SIGTERM handler (sys.exit(signum)) while it connects
            if exc.code == signal.SIGTERM:
                raise Terminated(signal.SIGTERM) from None
            raise
    try:
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        cpus = int(ray.cluster_resources().get("CPU", 0))
        yield RayCluster(len(nodes), cpus, sorted({str(n["NodeManagerAddress"]) for n in nodes}))
    finally:
        if owned:
            ray.shutdown()


@dataclass(frozen=True, slots=True)
class ClockOffset:
    """An actor's clock minus the coordinator's, and the most it can be off by."""

    offset_ns: int
    uncertainty_ns: int
    level: int | None = None  # the level it was taken before (None: at the start)


class _Actor:
    """One worker inside a Ray actor; every method runs on the actor's event loop."""

    def __init__(self, setup: WorkerSetup, worker: int) -> None:
        self._setup, self._worker = setup, worker
        self._pending: list[RequestRecord] = []
        self._runner: Runner | None = None
        self._source: SpecSource | SessionSource | TaskSource | None = None
        self._prepared: tuple[LevelPlan, Any] | None = None
        self._level: asyncio.Future[ShareDone] | None = None

    async def hello(self) -> tuple[str, str]:
        """Build the transport on this loop; say which node this is (id, address)."""
        ray = import_ray()
        self._runner = Runner(
            self._setup.make_transport(), self._pending.append, keep="none"
        )  # the coordinator keeps them
        self._source = self._setup.make_source()
        return str(ray.get_runtime_context().get_node_id()), str(ray.util.get_node_ip_address())

    async def now_ns(self) -> int:
        return _now()

    async def prepare(self, plan: LevelPlan) -> None:
        assert self._runner is not None and self._source is not None
        self._prepared = (plan, self._runner.prepare(plan, self._source))

    async def start(self, start_ns: int) -> None:
        assert self._runner is not None and self._prepared is not None
        plan, prepared = self._prepared
        self._prepared = None
        plan = dataclasses.replace(plan, start_ns=start_ns)
        self._level = asyncio.ensure_future(run_share(self._runner, plan, prepared, self._worker))

    async def drain(self) -> tuple[bytes, bytes, int, ShareDone | None]:
        """The records finished since the last drain, the requests in flight (encoded,
        and how many), and once the level has ended, how it went."""
        assert self._runner is not None
        end = None
        if self._level is not None and self._level.done():
            end, self._level = self._level.result(), None
        live = self._runner.in_flight_records()
        out = self._setup.encode(self._pending), self._setup.encode(live), len(live), end
        self._pending.clear()
        return out

    async def interrupt(self) -> None:
        if self._runner is not None:
            self._runner.interrupt()

    async def close(self) -> None:
        if self._runner is None:
            return
        if self._level is not None:
            self._runner.interrupt()
            with contextlib.suppress(BaseException):
                await self._level
        await self._runner.transport.aclose()


@dataclass(slots=True)
class _Member:
    index: int
    actor: Any
    node: str = ""
    address: str = ""
    alive: bool = True
    in_flight: int = 0
    live: bytes = b""  # the requests in flight at the last drain, encoded, on the actor's clock
    clock: ClockOffset = ClockOffset(0, 0)
    clocks: list[ClockOffset] = field(default_factory=list)
    lost: str | None = None


class _Lost:
    """What :meth:`RayPool._call` returns when the actor is lost."""


_LOST = _Lost()


def _shift(rec: RequestRecord, d: int) -> None:
    """Move a record's times by ``d`` ns (unset times stay 0)."""
    if rec.scheduled_ns:
        rec.scheduled_ns += d
    if rec.sent_ns:
        rec.sent_ns += d
    if rec.done_ns:
        rec.done_ns += d
    for ev in rec.events:
        ev[0] += d


class RayPool:
    """``n`` Ray actors that run levels together; the interface of
    :class:`~loadgen.load.workers.WorkerPool`. Enter it inside :func:`connect`."""

    def __init__(
        self,
        setup: WorkerSetup,
        n: int,
        on_records: Callable[[Sequence[RequestRecord]], None] | None = None,
        *,
        pings: int = PINGS,
        call_timeout_s: float = 60.0,
        start_timeout_s: float = 120.0,
    ) -> None:
        if n < 1:
            raise ValueError(f"workers must be >= 1, got {n}")
        self.setup, self.n, self.on_records = setup, n, on_records
        self.pings, self.call_timeout_s, self.start_timeout_s = pings, call_timeout_s, start_timeout_s
        self._members: list[_Member] = []
        self._level: LevelCollector | None = None
        self._waiting: set[int] = set()
        self._stop = False
        self._ray: Any = None
        self._background: set[asyncio.Future[Any]] = set()

    @property
    def in_flight(self) -> int:
        return sum(m.in_flight for m in self._members if m.alive)

    @property
    def interrupted(self) -> bool:
        return self._stop

    @property
    def nodes(self) -> list[str]:
        """Each worker's Ray node id."""
        return [m.node for m in self._members]

    def clock_report(self) -> list[dict[str, Any]]:
        """For ``run.json``: each worker's node, its latest clock offset and uncertainty,
        and every estimate taken (before which level)."""
        return [
            {
                "worker": m.index,
                "node": m.node,
                "address": m.address,
                "offset_ns": m.clock.offset_ns,
                "uncertainty_ns": m.clock.uncertainty_ns,
                "lost": m.lost,
                "estimates": [dataclasses.asdict(c) for c in m.clocks],
            }
            for m in self._members
        ]

    async def __aenter__(self) -> RayPool:
        ray = self._ray = import_ray()
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if self.n > cpus:
            raise TargetError(f"the Ray cluster has {cpus} CPUs and each of the {self.n} workers takes one")
        cls = ray.remote(max_restarts=0, max_task_retries=0, num_cpus=1)(_Actor)
        self._members = [
            _Member(i, cls.options(scheduling_strategy="SPREAD").remote(self.setup, i)) for i in range(self.n)
        ]
        hellos = await asyncio.gather(
            *(self._call(m, m.actor.hello.remote(), self.start_timeout_s) for m in self._members)
        )
        for m, hello in zip(self._members, hellos):
            if isinstance(hello, _Lost):
                await self.__aexit__(None, None, None)
                raise TargetError(f"Ray worker {m.index} did not start: {m.lost}")
            m.node, m.address = hello
        await self._estimate_clocks(self._members, None)
        return self

    async def __aexit__(self, *exc: object) -> None:
        live = [m for m in self._members if m.alive]
        await asyncio.gather(*(self._call(m, m.actor.close.remote(), 10.0) for m in live))
        for m in self._members:
            self._kill(m)

    def _kill(self, m: _Member) -> None:
        with contextlib.suppress(Exception):
            self._ray.kill(m.actor, no_restart=True)

    async def _call(self, m: _Member, ref: Any, timeout_s: float) -> Any:
        """Await one actor call; a Ray error or no answer in time loses the actor."""
        try:
            return await asyncio.wait_for(ref, timeout_s)
        except asyncio.TimeoutError:
            why = f"no answer within {timeout_s:g} s"
        except Exception as exc:
            if not isinstance(exc, self._ray.exceptions.RayError):
                raise
            lines = str(exc).strip().splitlines()
            why = f"{type(exc).__name__}: {lines[0] if lines else ''}"[:300]
        self._lose(m, why)
        return _LOST

    def _lose(self, m: _Member, why: str) -> None:
        if not m.alive:
            return
        m.alive, m.lost = False, why
        self._kill(m)  # gone, or not answering: either way it sends nothing more
        if self._level is not None:
            self._level.lose(m.index, self._decode(m, m.live) if m.index in self._waiting else [], why)
            self._waiting.discard(m.index)
        m.live, m.in_flight = b"", 0

    def _decode(self, m: _Member, blob: bytes) -> list[RequestRecord]:
        recs = self.setup.decode(blob)
        for r in recs:
            _shift(r, -m.clock.offset_ns)
        return recs

    async def _estimate_clocks(self, members: Sequence[_Member], level: int | None) -> None:
        async def one(m: _Member) -> None:
            best: tuple[int, int] | None = None
            for _ in range(self.pings):
                t0 = _now()
                t = await self._call(m, m.actor.now_ns.remote(), self.call_timeout_s)
                t1 = _now()
                if isinstance(t, _Lost):
                    return
                if best is None or t1 - t0 < best[0]:
                    best = (t1 - t0, t - (t0 + t1) // 2)
            if best is not None:
                m.clock = ClockOffset(best[1], (best[0] + 1) // 2, level)
                m.clocks.append(m.clock)

        await asyncio.gather(*(one(m) for m in members if m.alive))

    def end_level(self) -> bool:
        """Not with Ray yet: its actors cannot be told to end a level early."""
        return False

    def interrupt(self) -> None:
        """Stop the level: every actor cancels what it has in flight."""
        self._stop = True
        for m in self._members:
            if m.alive:
                task = asyncio.ensure_future(self._call(m, m.actor.interrupt.remote(), self.call_timeout_s))
                self._background.add(task)
                task.add_done_callback(self._background.discard)

    async def run_level(self, plan: LevelPlan, watch: LevelWatch | None = None) -> LevelResult:
        """Run ``plan`` over the live actors: each builds its share, then all start at one
        instant (each on its own clock). Records arrive through ``on_records``. A level
        run until precise (``watch``) is not supported here yet (RunConfig refuses it)."""
        if watch is not None:
            raise ConfigError("not with --ray yet", field="precision")
        live = [m for m in self._members if m.alive]
        if not live:
            raise TargetError("every Ray worker has been lost")
        level = self._level = LevelCollector(plan, self.on_records)
        self._waiting = {m.index for m in live}
        try:
            for m in live:
                m.live, m.in_flight = b"", 0
            await asyncio.gather(
                *(
                    self._call(m, m.actor.prepare.remote(plan.split_share(k, len(live), 0)), self.start_timeout_s)
                    for k, m in enumerate(live)
                )
            )
            await self._estimate_clocks(live, plan.index)
            ready = [m for m in live if m.alive]
            lead = max([START_LEAD_NS, *(20 * m.clock.uncertainty_ns for m in ready)])
            level.result.start_ns = start_ns = _now() + lead
            await asyncio.gather(
                *(self._call(m, m.actor.start.remote(start_ns + m.clock.offset_ns), self.call_timeout_s) for m in ready)
            )
            if self._stop:
                self.interrupt()
            await asyncio.gather(*(self._follow(m, level) for m in ready))
        finally:
            self._level = None
        res = level.finish(self._stop)
        res.clock_uncertainty_ns = max((m.clock.uncertainty_ns for m in live), default=None)
        return res

    async def _follow(self, m: _Member, level: LevelCollector) -> None:
        """Drain one actor at least every ``flush_s`` until its share ends or it is lost."""
        while m.alive:
            out = await self._call(m, m.actor.drain.remote(), self.call_timeout_s)
            if isinstance(out, _Lost):
                return
            blob, m.live, m.in_flight, end = out
            level.add(self._decode(m, blob))
            if end is not None:
                d = -m.clock.offset_ns
                stats = dataclasses.replace(end.stats, loop_lag_t_ns=[t + d for t in end.stats.loop_lag_t_ns])
                level.done(m.index, dataclasses.replace(end, stats=stats))
                m.live, m.in_flight = b"", 0
                self._waiting.discard(m.index)
                return
            await asyncio.sleep(self.setup.flush_s)
