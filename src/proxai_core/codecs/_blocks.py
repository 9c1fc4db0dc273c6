"""One open block at a time: the stream serializer of the Anthropic and Responses encoders.

Anthropic never opens a content block before it closed the previous one, and Responses never adds an
output item before the previous one is done. Neutral blocks may overlap (a Chat upstream's parallel
tool calls stay open until its finish, and their fragments may interleave), so one block is on the
wire and the events of the others wait, in start order, until it ends. A function call whose
arguments are one whole JSON object can take nothing more: it ends as soon as another block is
waiting, instead of holding that block until the finish.

Late fragment: tool-call arguments for a call that already ended that way. Whitespace is nothing.
Anything else means the upstream's arguments are not the object the client received. When the
client's SDK parses the arguments as they stream (``Capabilities.parses_streamed_arguments``), the
fragment is what invalid arguments are for such a client: the turn ends with the client's native
error event. Otherwise the fragment is dropped with a warning and the call keeps the complete object
the client already holds.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from ..neutral import BlockEnd, BlockStart, Delta, Error, ErrorKind, Event, Part, ToolCall

#: the warning of a dropped late fragment (once per stream)
LATE_FRAGMENT_DROPPED = "tool-call arguments after a complete JSON object were dropped"


def bad_arguments(call: Part | None, fragment: str | None, client: str) -> tuple[str, Error]:
    """The warning and the client's error when a tool call's arguments cannot reach a client that
    parses them as they stream: invalid JSON at ``fragment``, or (``None``) incomplete at the end."""
    name = call.name if isinstance(call, ToolCall) else ""
    call_id = call.id if isinstance(call, ToolCall) else ""
    if fragment is None:
        what, why = "are not a complete JSON object", "ended before their JSON object was complete"
    else:
        what, why = "are not valid JSON", f"stopped being a valid JSON object at the fragment {fragment[:60]!r}"
    warning = (f"tool call {call_id} ({name}): the upstream's arguments {why}; the {client} client's "
               "stream was ended with an error event and the rest of the upstream stream was dropped")
    error = Error(kind=ErrorKind.API_ERROR, status=502, message=(
        f"upstream sent tool-call arguments for tool {name!r} that {what}; the turn was ended"))
    return warning, error


class OneOpenBlockEncoder(ABC):
    """Orders neutral block events so that one block is open on the wire. The encoder writes a block
    (:meth:`_open_block`, :meth:`_write_delta`, :meth:`_close_block`); this class decides when."""

    __slots__ = ("_active", "_ended_early", "_held", "_parses_streamed_arguments", "warnings")

    warnings: list[str]
    #: the client protocol as warnings name it
    CLIENT = ""

    def __init__(self, parses_streamed_arguments: bool) -> None:
        self._parses_streamed_arguments = parses_streamed_arguments
        #: the neutral index of the block on the wire (-1: none)
        self._active = -1
        #: neutral index -> the events of a block waiting for the wire, in start order
        self._held: dict[int, list[Event]] = {}
        #: neutral index -> the tool call of a block that ended early (for a late fragment)
        self._ended_early: dict[int, Part | None] = {}

    # ---- what the encoder writes
    @abstractmethod
    def _open_block(self, ev: BlockStart, out: list[bytes]) -> None:
        """Write the block's start. A block that sends nothing (dropped) sets ``_active`` to -1."""

    @abstractmethod
    def _write_delta(self, ev: Delta, out: list[bytes]) -> None:
        """Write a delta of an open block (also a held one, once its block is on the wire)."""

    @abstractmethod
    def _close_block(self, index: int, final: Part | None, out: list[bytes]) -> None:
        """Write the block's end (``final``: the whole part when the upstream gave it)."""

    @abstractmethod
    def _is_complete(self, index: int) -> bool:
        """The open block is a function call whose arguments are one whole JSON object."""

    @abstractmethod
    def _tool_call(self, index: int) -> Part | None:
        """The part of the open block (what a late fragment's error names)."""

    @abstractmethod
    def _fail(self, warning: str, error: Error, out: list[bytes]) -> None:
        """End the turn with the client's native error event."""

    def _stalled(self) -> bool:
        """Nothing more goes on the wire (the turn ended, or a block was left cut)."""
        return False

    # ---- the order
    def _block_start(self, ev: BlockStart, out: list[bytes]) -> None:
        a = self._active
        if a >= 0:
            if not self._is_complete(a):
                self._held[ev.index] = [ev]  # sent when the block on the wire ends
                return
            self._end_early(a, out)
        self._active = ev.index
        self._open_block(ev, out)

    def _block_end(self, ev: BlockEnd, out: list[bytes]) -> None:
        held = self._held.get(ev.index)
        if held is not None:
            held.append(ev)
            return
        self._end_on_wire(ev, out)
        self._promote(out)

    def _end_on_wire(self, ev: BlockEnd, out: list[bytes]) -> None:
        self._ended_early.pop(ev.index, None)
        if ev.index == self._active:
            self._active = -1
        self._close_block(ev.index, ev.part, out)

    def _delta_elsewhere(self, ev: Delta, out: list[bytes]) -> None:
        """A delta of a block that is not open: held with its block, a late fragment, or nothing."""
        held = self._held.get(ev.index)
        if held is not None:
            held.append(ev)
        elif ev.kind == "arguments" and ev.index in self._ended_early:
            self._late_fragment(ev.index, ev.value, out)

    def _after_arguments(self, index: int, out: list[bytes]) -> None:
        """Arguments went out for the block on the wire: once whole, a waiting block need not wait."""
        if self._held and index == self._active and self._is_complete(index):
            self._end_early(index, out)
            self._promote(out)

    def _end_early(self, index: int, out: list[bytes]) -> None:
        self._ended_early[index] = self._tool_call(index)
        self._active = -1
        self._close_block(index, None, out)

    def _late_fragment(self, index: int, fragment: str, out: list[bytes]) -> None:
        if not fragment.strip():
            return
        if self._parses_streamed_arguments:
            warning, error = bad_arguments(self._ended_early[index], fragment, self.CLIENT)
            self._fail(warning, error, out)
        elif LATE_FRAGMENT_DROPPED not in self.warnings:
            self.warnings.append(LATE_FRAGMENT_DROPPED)

    def _promote(self, out: list[bytes]) -> None:
        """The block on the wire ended: the held blocks follow, in start order."""
        held = self._held
        while self._active < 0 and held and not self._stalled():
            for ev in held.pop(next(iter(held))):
                if isinstance(ev, BlockStart):
                    self._active = ev.index
                    self._open_block(ev, out)
                elif isinstance(ev, BlockEnd):
                    self._end_on_wire(ev, out)
                elif isinstance(ev, Delta):
                    self._write_delta(ev, out)

    def _flush_held(self, out: list[bytes]) -> None:
        """The turn ends: every held block goes out after the one on the wire ends."""
        while self._held and not self._stalled():
            if self._active >= 0:
                self._end_on_wire(BlockEnd(self._active), out)
            self._promote(out)
