"""Which connections the HTTP server keeps: a cap on connections in all and per client, where a connection that
has not yet sent its request (a TLS handshake, headers under way, or nothing at all) gives way to a new one.

Any pod can reach the port. Before, every connection held one of 16 slots from its accept, through its TLS
handshake (up to 10 s), to its answer: 16 idle TCP connections made the kubelet's probes fail. Now:

- at most `max_connections` are open at once, at most `per_client` from one address;
- at the cap, the connection that has waited longest for its request is closed to admit the new one (first that
  client's own when it is at its own cap): an idle or trickling connection only holds its place until newer ones
  need it, while a probe's handshake and request take milliseconds, so it is never the one waiting longest;
- a connection whose request arrived is no longer closed that way (it is being answered); only when every open
  connection is being answered is a new one refused.

What is left: clients from many addresses opening connections faster than a probe completes its handshake could
still close the probe's. Thread count is bounded by `max_connections`; what a request may do once read (the
probes always, other paths within the server's request slots) is the server's.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["MAX_CONNECTIONS", "MAX_PER_CLIENT", "ConnectionLimits", "Ticket"]

MAX_CONNECTIONS = 64
MAX_PER_CLIENT = 32  # a client doing 16 requests at once (a script, explain, a test) must not lose them


@dataclass(eq=False)
class Ticket:
    """One admitted connection. `control` is a duplicate of its socket, kept to shut the connection down from
    another thread (the serving thread wraps the original for TLS, which detaches it); closed on release."""

    client: str
    control: socket.socket
    opened: float
    answering: bool = False
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


class ConnectionLimits:
    def __init__(self, max_connections: int = MAX_CONNECTIONS, per_client: int = MAX_PER_CLIENT, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_connections < 1 or per_client < 1:
            raise ValueError("max_connections and per_client must be at least 1")
        self.max_connections = max_connections
        self.per_client = per_client
        self._clock = clock
        self._lock = threading.Lock()
        self._open: OrderedDict[Ticket, None] = OrderedDict()  # admission order: the oldest first
        self._by_client: dict[str, int] = {}
        self.evicted = 0
        self.refused = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def admit(self, sock: socket.socket, client: str) -> Ticket | None:
        """From the accepting thread (never blocks): a ticket for the new connection, after closing the waiting
        connections it displaces; None when it cannot be admitted (every connection in its way is answering)."""
        displaced: list[Ticket] = []
        with self._lock:
            if self._by_client.get(client, 0) >= self.per_client:
                victim = self._oldest_waiting(client)
                if victim is None:
                    self.refused += 1
                    return None
                displaced.append(victim)
            if len(self._open) - len(displaced) >= self.max_connections:
                victim = self._oldest_waiting(None, skip=displaced)
                if victim is None:
                    self.refused += 1
                    return None
                displaced.append(victim)
            try:
                control = sock.dup()
            except OSError:
                self.refused += 1
                return None
            for victim in displaced:
                with victim.lock:  # from now on its request, if it arrives, is not answered
                    victim.closed = True
                self._forget(victim)
            ticket = Ticket(client, control, self._clock())
            self._open[ticket] = None
            self._by_client[client] = self._by_client.get(client, 0) + 1
            self.evicted += len(displaced)
        for victim in displaced:
            self._shut(victim)
        return ticket

    def answering(self, ticket: Ticket) -> bool:
        """The connection's request arrived: it is no longer displaced. False when it was displaced already."""
        with ticket.lock:
            if ticket.closed:
                return False
            ticket.answering = True
            return True

    def release(self, ticket: Ticket) -> None:
        """The connection is done (from its own thread, after the server closed it)."""
        with self._lock:
            if ticket in self._open:
                self._forget(ticket)
        with ticket.lock:  # never while another thread shuts it down (_shut): the descriptor could be reused
            ticket.closed = True
            ticket.control.close()

    def _oldest_waiting(self, client: str | None, skip: list[Ticket] | None = None) -> Ticket | None:
        for ticket in self._open:
            if (client is not None and ticket.client != client) or (skip and ticket in skip):
                continue
            with ticket.lock:
                if not ticket.answering:
                    return ticket
        return None

    def _forget(self, ticket: Ticket) -> None:
        del self._open[ticket]
        left = self._by_client[ticket.client] - 1
        if left:
            self._by_client[ticket.client] = left
        else:
            del self._by_client[ticket.client]

    @staticmethod
    def _shut(ticket: Ticket) -> None:
        """Ends a displaced connection: its thread's handshake or read fails at once and the thread ends (and
        releases it, which closes `control`: the descriptor is ours until then, never another connection's)."""
        # OSError: released meanwhile (closed: no descriptor), or the client went already.
        with ticket.lock, contextlib.suppress(OSError):
            ticket.control.shutdown(socket.SHUT_RDWR)
