"""How large the cluster's nodes are, so a task no node can hold is refused at submission.

The scheduler is the one that knows: its status answer (``pai.rpc.scheduler.virtual-clusters``,
which REST already asks for VC names and status) lists every node it was told of, healthy or
not, with what the node offers as its monitor reported it. That is the offered capacity, not
the machine's: `pai up` sets PAI_CPU_OVERCOMMIT and PAI_MEMORY_OVERCOMMIT, and its monitor
reports the cores and memory multiplied by them, which is what the scheduler places against.

The answer is kept for a while; a task larger than the largest node kept asks again (at most
once a second), since a larger node may have reported since. When nobody can tell, the job is
accepted and the scheduler says, in the job's pending reason, why it waits: no scheduler
answered yet, it is still replaying its streams after a start, or no node has reported (a
cluster coming up). A scheduler that does not answer within the timeout (busy, or its answer
too large for the bus) is not asked again for ``keep_for``: each submission would otherwise
wait for it, where not knowing costs only a job that waits with a reason.

The same answer says how much each VC could ever hold (its cells, its quota, the nodes in all),
so a job its VC could never hold is refused too (``rooms``, judged by libs/protocol/vc_fit.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

import nats.errors
import structlog
from aiohttp import web
from nats.aio.client import Client as NATS

from libs.protocol import JobConfig, Problem, masked_config
from libs.protocol.subjects import VC_STATUS_RPC
from libs.protocol.vc_fit import VcRoom, demand_of_config, never_fits
from services.rest.core.errors import INVALID_PROTOCOL
from services.rest.core.node_fit import NodeSize, rooms_in_status, sizes_in_status
from services.rest.keys import BUS

log = structlog.get_logger(__name__)

Sizes = tuple[NodeSize, ...]
Rooms = dict[str, VcRoom]


class NodeSizes:
    """The nodes the scheduler places on, asked and kept."""

    def __init__(
        self,
        nc: NATS,
        *,
        ask_timeout: float = 1.0,
        keep_for: float = 30.0,
        ask_again_after: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nc = nc
        self._ask_timeout = ask_timeout
        self._keep_for = keep_for
        self._ask_again_after = ask_again_after
        self._clock = clock
        self._asked: tuple[Sizes, float] | None = None
        self._rooms: Rooms = {}  # from the same answer as the nodes
        self._silent_since: float | None = None
        self._asking = asyncio.Lock()

    async def rooms(self, fits: Callable[[Rooms], bool]) -> Rooms | None:
        """How much each VC could ever hold, fresh enough to judge a job (``fits``: whether it
        fits them); None when nobody can tell."""
        sizes = await self.sizes(lambda _: fits(self._rooms))
        return self._rooms if sizes is not None and self._rooms else None

    async def sizes(self, fits: Callable[[Sizes], bool]) -> Sizes | None:
        """The nodes, fresh enough to judge a job (``fits``: whether it fits them); None when
        nobody can tell."""
        if (known := self._known(fits)) is not None:
            return known
        async with self._asking:  # one question at a time; the others take its answer
            if (known := self._known(fits)) is not None:
                return known
            silent = self._silent_since is not None and self._clock() - self._silent_since < self._keep_for
            if silent or not self._nc.is_connected:  # the bus is down: the submission gets a 503
                return self._asked[0] if self._asked is not None else None
            answered = await self._ask()
            if answered is not None:
                self._asked = (answered, self._clock())
                return answered
            # The scheduler is away: nodes it named earlier beat not knowing.
            return self._asked[0] if self._asked is not None else None

    def _known(self, fits: Callable[[Sizes], bool]) -> Sizes | None:
        if self._asked is None:
            return None
        sizes, at = self._asked
        age = self._clock() - at
        if age < self._ask_again_after or (age < self._keep_for and fits(sizes)):
            return sizes
        return None

    async def _ask(self) -> Sizes | None:
        try:
            reply = await self._nc.request(VC_STATUS_RPC, b"{}", timeout=self._ask_timeout)
        except nats.errors.NoRespondersError:
            return None  # no scheduler yet: answered at once, so asking again costs nothing
        except (TimeoutError, nats.errors.Error) as err:
            self._silent_since = self._clock()
            log.warning(
                "the scheduler did not say how large its nodes are; submissions are not held to them "
                f"for {self._keep_for:g}s",
                error=repr(err),
            )
            return None
        self._silent_since = None
        try:
            answer = json.loads(reply.data or b"null")
        except ValueError:
            return None
        sizes = sizes_in_status(answer)
        if sizes is not None:
            self._rooms = rooms_in_status(answer, sizes)
        return sizes


NODE_SIZES = web.AppKey("node_sizes", NodeSizes)


async def node_sizes_ctx(app: web.Application) -> AsyncIterator[None]:
    """Open after the bus; nothing to close (questions are asked as submissions come)."""
    app[NODE_SIZES] = NodeSizes(app[BUS].bus.nc)
    yield


async def require_vc_room(request: web.Request, job: JobConfig) -> None:
    """400 InvalidProtocolError for a job its VC could never hold (more GPUs than its cells, a
    task larger than its largest cell, more than its quota or the nodes in all), naming the VC,
    its size and the job's demand; accepted when the VCs' sizes are not known."""
    demand = demand_of_config(masked_config(job), job.priority or None)

    def judged(rooms: Rooms) -> bool:
        room = rooms.get(job.virtual_cluster)
        return room is None or never_fits(demand, room) is None

    rooms = await request.app[NODE_SIZES].rooms(judged)
    room = (rooms or {}).get(job.virtual_cluster)
    why = never_fits(demand, room) if room is not None else None
    if why is not None:
        problem = Problem(path="defaults.virtualCluster", message=why.message, hint=why.hint)
        raise INVALID_PROTOCOL(why.hint, reason=why.message, problems=[problem.model_dump()])
