"""DualPipe and DualPipeV in the event simulation: each rank runs the reference implementation's
own ``step()`` program (deepseek-ai/DualPipe, ``dualpipe/dualpipe.py`` and ``dualpipev.py``),
chunk by chunk, with its sends and receives where that code posts them.

The reference program is a sequence of chunks: a forward (F), a backward (B: the full backward,
or with zero-bubble only the input gradient, its weight gradient queued), a weight-gradient
chunk (W: the oldest queued), and an overlapped forward-and-backward of two micro-batches (F&B,
as long as F + full B here: the overlap hides communication, not compute). Before each chunk the
code commits every send and receive it has posted and waits for them all
(``_commit_and_wait_comm``), so a chunk starts when the rank is free and every input posted so
far has arrived, and a send leaves when the rank reaches its next chunk. Communication takes no
time. Phases: DualPipe's ranks each hold stage r of the pipeline fed at rank 0 and stage p-1-r of
the one fed at rank p-1, m/2 micro-batches each way (the second half of the ranks swaps its local
phase numbers: ``phase ^= is_in_second_half``); DualPipeV's rank r holds virtual stages r and
2p-1-r of one V-shaped pipeline, every micro-batch going down and coming back up (at rank p-1
the turn is local).

Chunk times: a DualPipe chunk is one stage, the whole per-micro-batch time of a rank; a DualPipeV
chunk is one of a rank's two half-stages, half of it. A zero-bubble backward leaves half of the
backward to its W chunk (the ZB papers' T_B = T_W, Qi et al. 2023). With F = B = W = one unit per
chunk the simulation reproduces the reference schedules' published pictures: tests/test_simulate.py.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from planner.cost.simulate import Op, Timeline


@dataclass
class _Program:
    """Builds one rank's instruction list the way the reference ``step()`` calls its helpers."""

    ops: list[tuple] = field(default_factory=list)

    def forward(self, phase: int, recv: bool = True, send: bool = True) -> None:
        if recv:
            self.ops.append(("recvF", phase))
        self.ops += [("commit",), ("F", phase)]
        if send:
            self.ops.append(("sendF", phase))

    def backward(self, phase: int, zb: bool = False, recv: bool = True, send: bool = True) -> None:
        if recv:
            self.ops.append(("recvB", phase))
        self.ops += [("commit",), ("B", phase, zb)]
        if send:
            self.ops.append(("sendB", phase))

    def forward_backward(self, phase0: int, phase1: int, recv0: bool = True) -> None:
        if recv0:
            self.ops.append(("recvF", phase0))
        self.ops += [("recvB", phase1), ("commit",), ("FB", phase0, phase1), ("sendF", phase0), ("sendB", phase1)]

    def weight(self) -> None:
        self.ops += [("commit",), ("W",)]


@dataclass
class _Rank:
    """A rank's progress: next instruction, when it is free, chunk counters per phase (compute,
    sends and receives, as the reference keeps them), messages posted but not yet committed, and
    the queued weight gradients (FIFO, as ``WeightGradStore``)."""

    pc: int = 0
    free: float = 0.0
    ids: dict[str, list[int]] = field(
        default_factory=lambda: {key: [0, 0] for key in ("F", "B", "sendF", "sendB", "recvF", "recvB")}
    )
    pending: list[tuple[str, int, int, int]] = field(default_factory=list)
    posted: list[tuple[str, int, int, int]] = field(default_factory=list)
    weights: deque[tuple[int, int]] = field(default_factory=deque)


def _program(v_shape: bool, rank: int, p: int, m: int) -> list[tuple]:
    """The reference ``step()`` of one rank: DualPipe (``v_shape`` False) counts in half-ranks and
    half the micro-batches, DualPipeV in ranks and all of them; the eight steps are the same."""
    if v_shape:
        r, ranks, chunks, middle = rank, p, m, rank == p - 1
    else:
        r, ranks, chunks = min(rank, p - 1 - rank), p // 2, m // 2
        middle = r == ranks - 1
    prog = _Program()
    for _ in range((ranks - r - 1) * 2):  # step 1: nF0
        prog.forward(0)
    prog.ops.append(("recvF", 0))  # step 2: nF0F1
    for i in range(r + 1):
        prog.forward(0, recv=False, send=middle and not v_shape)
        prog.ops.append(("recvF", 0))
        prog.forward(1, send=(not middle) or i < r)
        if v_shape or not middle:
            prog.ops.append(("sendF", 0))
    for _ in range(ranks - r - 1):  # step 3: nB1W1F1
        prog.backward(1, zb=True)
        prog.ops.append(("recvF", 1))
        prog.weight()
        prog.forward(1, recv=False)
    for i in range(chunks - 2 * ranks + r + 1):  # step 4 (main): nF0B1F1B0
        if i == 0 and middle:  # the reference does not overlap these two
            prog.forward(0, recv=False, send=False)
            prog.ops.append(("sendF", 1))
            prog.backward(1, send=False)
            prog.ops += [("sendF", 0), ("sendB", 1)]
        else:
            prog.forward_backward(0, 1, recv0=i > 0)
        prog.forward_backward(1, 0)
    for _ in range(ranks - r - 1):  # step 5: nB1F1B0
        prog.backward(1)
        prog.forward_backward(1, 0)
    zb = False  # step 6: nB1B0, the second half with zero bubble
    for i in range(r + 1):
        if i == (r + 1) // 2 and r % 2 == 1:
            zb = True
        prog.backward(1, zb=zb)
        if i == (r + 1) // 2 and r % 2 == 0:
            zb = True
        prog.backward(0, zb=zb)
    for _ in range(ranks - r - 1):  # step 7: nWB0
        prog.weight()
        prog.backward(0, zb=True)
    for _ in range(r + 1):  # step 8: nW
        prog.weight()
    prog.ops.append(("commit",))
    return prog.ops


def simulate_dual(schedule: str, p: int, m: int, forward_s: float, backward_s: float) -> Timeline:
    """Run DualPipe (``schedule`` 'dualpipe') or DualPipeV with ``forward_s`` / ``backward_s`` per
    micro-batch per rank; the caller has checked the reference's rules (p and m even for DualPipe,
    m >= 2p)."""
    v_shape = schedule == "dualpipev"
    chunk = 0.5 if v_shape else 1.0  # a V rank's micro-batch passes through both its half-stages
    f, b = forward_s * chunk, backward_s * chunk
    w = b / 2.0
    programs = [_program(v_shape, r, p, m) for r in range(p)]
    half = m if v_shape else m // 2  # micro-batches per phase

    def phase_of(rank: int, local: int) -> int:
        return local ^ (0 if v_shape else int(rank >= p // 2))

    def peer(rank: int, phase: int, downstream: bool) -> int | None:
        """The rank a phase's activations go to (``downstream``) or come from; None at its ends."""
        other = rank + (1 if (phase == 0) == downstream else -1)
        return other if 0 <= other < p else None  # DualPipeV's turn at rank p-1 is local: no message

    sent: dict[tuple[str, int, int, int], float] = {}  # (F|B, phase, chunk id, receiver) -> time
    state = [_Rank() for _ in range(p)]
    ops: list[Op] = []

    def microbatch(phase: int, index: int) -> int:
        return phase * half + index if not v_shape else index

    def run_compute(r: int, instr: tuple) -> None:
        st = state[r]
        ids, start, kind = st.ids, st.free, instr[0]
        if kind == "F":
            g = phase_of(r, instr[1])
            i = ids["F"][g]
            ids["F"][g] += 1
            ops.append(Op(r, "F", microbatch(g, i), g, start, start + f))
            st.free = start + f
        elif kind == "B":
            g, zb = phase_of(r, instr[1]), instr[2]
            i = ids["B"][g]
            ids["B"][g] += 1
            length = b - w if zb else b
            ops.append(Op(r, "B", microbatch(g, i), g, start, start + length))
            if zb:
                st.weights.append((g, i))
            st.free = start + length
        elif kind == "FB":
            g0, g1 = phase_of(r, instr[1]), phase_of(r, instr[2])
            i0, i1 = ids["F"][g0], ids["B"][g1]
            ids["F"][g0] += 1
            ids["B"][g1] += 1
            ops.append(Op(r, "F", microbatch(g0, i0), g0, start, start + f))
            ops.append(Op(r, "B", microbatch(g1, i1), g1, start + f, start + f + b))
            st.free = start + f + b
        else:  # W
            g, i = st.weights.popleft()
            ops.append(Op(r, "W", microbatch(g, i), g, start, start + w))
            st.free = start + w

    def step(r: int) -> bool:
        """Run rank r's next instruction if it can; False when it waits on a message."""
        st = state[r]
        instr = programs[r][st.pc]
        kind, ids = instr[0], st.ids
        if kind in ("recvF", "recvB", "sendF", "sendB"):
            g = phase_of(r, instr[1])
            downstream = kind in ("sendF", "recvB")
            other = peer(r, g, downstream)
            if other is not None:
                i = ids[kind][g]
                ids[kind][g] += 1
                if kind.startswith("recv"):
                    st.pending.append((kind[-1], g, i, r))
                else:
                    st.posted.append((kind[-1], g, i, other))
        elif kind == "commit":
            for key in st.posted:
                sent[key] = st.free
            st.posted = []
            if any(key not in sent for key in st.pending):
                return False
            st.free = max([st.free, *(sent[key] for key in st.pending)])
            st.pending = []
        else:
            run_compute(r, instr)
        st.pc += 1
        return True

    remaining = sum(len(prog) for prog in programs)
    while remaining:
        progressed = False
        for r in range(p):
            while state[r].pc < len(programs[r]) and step(r):
                remaining -= 1
                progressed = True
        if not progressed:
            raise RuntimeError(f"{schedule} program deadlocks for p={p}, m={m}")  # a bug, not user input
    # a V chunk stores half a rank's activations of a micro-batch: counted as 1/2 in peak_in_flight
    return Timeline.of(ops, m * (forward_s + backward_s), 2 if v_shape else 1)
