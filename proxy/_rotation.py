"""Where a rotated recording goes on, and where a Python child records: the next run's id,
recipient and location.

A run the recorder rotates (`--rotate-requests`, `--rotate-size`) goes on in a new run beside
it in the store, sealed to a recipient under a key of its own (_recorder.py's _rotated). Who
names that run depends on how the recording was started:

- with a recipient file (`--recipient`, `start_recording`): `NumberedRuns`, the first run's
  id and location numbered on, "<first>.2", "<first>.3", ..., all sealed to that recipient
  (and a Python child's own run: "<run>-c1", ...);
- through the server (`--server`): `LeasedRuns`, keys the server leased. The `sealtrace record`
  process, which holds the record token and leases them (_recording_cli.py's PlatformRuns),
  keeps a lease or two ahead in a FIFO the recorder reads when it rotates or starts a Python
  child; each is one fixed-size record
  (`LEASE_RECORD` bytes, written whole: a FIFO write that small is atomic, so the recorders of
  a forked program each take whole leases). A lease is public (a run id and a public key): the
  program can read the FIFO, and at worst take or plant leases, costing runs their rotation or
  recording (a planted key is one the server cannot open, so nothing it records is readable
  by anyone the program could not already tell), never the confidentiality of another run.

A source that has no run ready answers None: the run goes on and rotates at the next chance.
Standard library only (plus the recorder's own modules): this is imported into the program.
"""

from __future__ import annotations

import base64
import errno
import json
import os
import stat
from typing import Protocol

from ._format import valid_location_name, validate_run_id
from ._keys import Recipient

__all__ = ["LEASE_RECORD", "LeasedRuns", "NextRun", "NumberedRuns", "encode_lease"]

LEASE_RECORD = 256  # bytes a lease takes in the FIFO: under PIPE_BUF, so written whole


class NextRun(Protocol):
    def __call__(
        self, run_id: str, location: str, process: str
    ) -> tuple[str, Recipient, str] | None:
        """The run to go on in after `run_id` (stored at `location`, recorded by forked
        process `process`, "" the recorded one): its id, recipient and location's name beside
        `location`; None if none is ready yet."""
        ...

    def forked(self) -> NextRun:
        """The source for a process the program forked."""
        ...

    def child(self, run_id: str, location: str, process: str) -> tuple[str, Recipient, str] | None:
        """A run for a Python child the program starts (its own run: `run_id`'s child)."""
        ...


class NumberedRuns:
    """Runs named for the process's first: "<run>.2", "<run>.3", ... at "<location>.2", ...
    (a forked process's "<run>-p1.2" at "<location>-p1.2"), sealed to one recipient."""

    def __init__(self, recipient: Recipient) -> None:
        self._recipient = recipient
        self._base: tuple[str, str] | None = None
        self._number = 1

    def __call__(self, run_id: str, location: str, process: str) -> tuple[str, Recipient, str]:
        if self._base is None:
            own = f"-p{process}" if process else ""
            self._base = (f"{run_id}{own}", f"{location}{own}")
        self._number += 1
        run, where = (f"{base}.{self._number}" for base in self._base)
        return run, self._recipient, where

    def forked(self) -> NumberedRuns:
        """The source of a forked process: its own names."""
        return NumberedRuns(self._recipient)

    def child(self, run_id: str, location: str, process: str) -> tuple[str, Recipient, str]:
        """A Python child's run: "<run>-c1", "<run>-c2", ... (a forked process's children
        "<run>-p1-c1", ...) at "<location>-c1", ..."""
        self._children += 1
        own = f"-p{process}" if process else ""
        suffix = f"{own}-c{self._children}"
        return f"{run_id}{suffix}", self._recipient, f"{location}{suffix}"

    _children = 0


def encode_lease(run_id: str, public_key: bytes) -> bytes:
    """One lease as the FIFO carries it (LEASE_RECORD bytes, space-padded JSON)."""
    text = json.dumps({"run": run_id, "key": base64.b64encode(public_key).decode()}).encode()
    if len(text) > LEASE_RECORD:
        raise ValueError("a lease's run id is too long for the feed")
    return text.ljust(LEASE_RECORD)


def decode_lease(record: bytes) -> tuple[str, Recipient] | None:
    """A lease read from the FIFO, or None if it is not one (anything malformed)."""
    try:
        fields = json.loads(record)
        run_id, key = fields["run"], base64.b64decode(fields["key"], validate=True)
        validate_run_id(run_id)
        if not valid_location_name(run_id):
            return None
        return run_id, Recipient.from_raw(key)
    except (ValueError, TypeError, KeyError):
        return None


class LeasedRuns:
    """Runs the server leased, read one lease at a time from the FIFO `path` that the
    `sealtrace record` process keeps filled (PlatformRuns); each run is stored beside the run
    before, under its run id (as the server names a run's location: <store>/<run id>)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(
        self, run_id: str, location: str, process: str
    ) -> tuple[str, Recipient, str] | None:
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                return None
            while True:
                try:
                    record = os.read(fd, LEASE_RECORD)
                except OSError as exc:
                    if exc.errno == errno.EAGAIN:
                        return None
                    raise
                if len(record) < LEASE_RECORD:
                    return None  # empty (or not a feed's): no lease ready
                lease = decode_lease(record)
                if lease is not None:
                    return lease[0], lease[1], lease[0]
        finally:
            os.close(fd)

    def forked(self) -> LeasedRuns:
        return self

    def child(self, run_id: str, location: str, process: str) -> tuple[str, Recipient, str] | None:
        return self(run_id, location, process)
