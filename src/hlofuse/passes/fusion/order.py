"""Keeping a computation's instruction list in post order across many merges, incrementally.

The multi-output mechanics (ir/fusion.py) and horizontal fusion end every merge with
`comp.instructions = comp.post_order()`: a DFS over the whole computation, O(n) per merge and
O(n^2) per pass. `PostOrderKeeper.restore(comp, fusion)` produces the same list from the few
places a merge touches:

    before the merge the list L is a post order (defs before uses), and a merge into `fusion`
    only (1) gives `fusion` new operands, (2) inserts get-tuple-elements right after `fusion`,
    and tuples, bitcasts (and, for horizontal fusion, `fusion` itself) at the end, (3) points
    users of the absorbed instructions at those, (4) removes instructions. Re-running the DFS
    over the edited list L' emits every node whose operands all come earlier in L' in place;
    only a node with an operand listed after it (a "dirty" node: `fusion` or one of the users
    above) makes the DFS pull that operand, and the operand's own not-yet-emitted operands, in
    front of it.

So restore() labels the new instructions, finds the dirty nodes among `fusion`, its users, the
new instructions and their users, replays the DFS from each dirty node in list order with
"emitted" = "labelled lower, or already pulled", and splices the pulled instructions in. Order
labels (floats increasing along the list) answer "listed before?" in O(1); they are spread
evenly again when two neighbours get too close.

Conditions enforced: the first restore of a computation (and any surprise: an unlabelled
instruction where none should be) falls back to the full `post_order()`, so the incremental
path only starts from a list that is a post order; the result is always the list
`post_order()` would give (tests/test_compile_scaling.py compares them on random merges).
"""

from __future__ import annotations

from hlofuse.ir.computation import Computation
from hlofuse.ir.instruction import Instruction

_MIN_GAP = 1e-6


class PostOrderKeeper:
    """`restore(comp, fusion)` after each multi-output merge into `fusion` in `comp`."""

    def __init__(self, comp: Computation) -> None:
        self.comp = comp
        self.label: dict[Instruction, float] | None = None

    def restore(self, comp: Computation, fusion: Instruction) -> None:
        """Make `comp.instructions` what `comp.post_order()` would (the ir.fusion Reorder
        hook), after a merge into `fusion`."""
        if comp is not self.comp:
            comp.instructions = comp.post_order()
            return
        if self.label is None or fusion.parent is not comp or not self._restore(fusion):
            comp.instructions = comp.post_order()
            self._relabel()

    def _relabel(self) -> None:
        self.label = {instr: float(k) for k, instr in enumerate(self.comp.instructions)}

    # ----- the incremental path ------------------------------------------------------------

    def _restore(self, fusion: Instruction) -> bool:
        """The incremental restore; False when it cannot vouch for the result."""
        label = self.label
        assert label is not None
        instrs = self.comp.instructions
        new: set[Instruction] = set()
        self._label_new(fusion, new)
        # Operand lists changed only for `fusion`, the new nodes (None: check every operand)
        # and users of `fusion` or of new nodes, whose other operands are unchanged and so
        # still listed before them (a root tuple has hundreds): check the changed ones only.
        candidates: dict[Instruction, list[Instruction] | None] = {fusion: None}
        for x in new:
            candidates[x] = None
        for y in (fusion, *new):
            for u in y.users:
                changed = candidates.setdefault(u, [])
                if changed is not None:
                    changed.append(y)
        dirty: list[Instruction] = []
        for x, changed in candidates.items():
            lx = label.get(x)
            if lx is None:
                return False
            for p in (*x.operands, *x.control_predecessors) if changed is None else changed:
                lp = label.get(p)
                if lp is None:
                    return False
                if lp >= lx:
                    dirty.append(x)
                    break
        if not dirty:
            return True
        dirty.sort(key=label.__getitem__)
        pulled: set[Instruction] = set()
        blocks: list[tuple[Instruction, list[Instruction]]] = []
        for x in dirty:
            if x in pulled:
                continue
            block = self._dfs(x, pulled)
            if block is None:
                return False
            if block:
                blocks.append((x, block))
                pulled.update(block)
        comp = self.comp
        for _, block in blocks:
            for node in block:
                del instrs[comp.position(node)]
                comp.moved(1)  # (before the next lookup: each deletion shifts the later ones)
        for x, block in blocks:
            at = comp.position(x)
            instrs[at:at] = block
            comp.moved(len(block), at, block)
            if not self._label_run(at, at + len(block)):
                self._relabel()
        return True

    def _dfs(self, x: Instruction, pulled: set[Instruction]) -> list[Instruction] | None:
        """The nodes `post_order()`'s DFS from `x` emits before `x` (not counting `x`): its
        operands, transitively, that are listed after it and not yet pulled, in DFS order."""
        label = self.label
        assert label is not None
        lx = label[x]
        seen: set[Instruction] = {x}
        out: list[Instruction] = []

        def unseen(node: Instruction) -> bool | None:
            if node in seen or node in pulled:
                return False
            ln = label.get(node)
            return None if ln is None else ln > lx

        stack: list[tuple[Instruction, bool]] = [(x, True)]
        preds = [*x.operands, *x.control_predecessors]
        for op in reversed(preds):
            u = unseen(op)
            if u is None:
                return None
            if u:
                stack.append((op, False))
        while stack:
            node, expanded = stack.pop()
            if expanded:
                if node is not x:
                    out.append(node)
                continue
            if node in seen:
                continue
            seen.add(node)
            stack.append((node, True))
            for op in reversed([*node.operands, *node.control_predecessors]):
                u = unseen(op)
                if u is None:
                    return None
                if u:
                    stack.append((op, False))
        return out

    def _label_new(self, fusion: Instruction, new: set[Instruction]) -> None:
        """Label the instructions a merge added: the run around `fusion` (a fusion that just
        replaced an instruction, the get-tuple-elements right after it) and the run at the end
        of the list (tuples)."""
        label = self.label
        assert label is not None
        instrs = self.comp.instructions
        at = self.comp.position(fusion)
        lo = at
        while lo > 0 and instrs[lo - 1] not in label:
            lo -= 1
        hi = at + 1
        while hi < len(instrs) and instrs[hi] not in label:
            hi += 1
        if fusion in label:
            runs = [(lo, at), (at + 1, hi)]
        else:
            runs = [(lo, hi)]
        end = len(instrs)
        while end > hi and instrs[end - 1] not in label:
            end -= 1
        runs.append((end, len(instrs)))
        for start, stop in runs:
            new.update(i for i in instrs[start:stop] if i not in label)
        for start, stop in runs:
            if not self._label_run(start, stop):
                self._relabel()

    def _label_run(self, start: int, stop: int) -> bool:
        """Give instrs[start:stop] labels evenly spaced between their neighbours'; False when
        the neighbours are too close (the caller relabels everything)."""
        label = self.label
        assert label is not None
        instrs = self.comp.instructions
        n = stop - start
        if n <= 0:
            return True
        lo = label[instrs[start - 1]] if start > 0 else label.get(instrs[stop], 0.0) - n - 1
        hi = label[instrs[stop]] if stop < len(instrs) else lo + n + 1
        step = (hi - lo) / (n + 1)
        if step < _MIN_GAP:
            return False
        for k in range(n):
            label[instrs[start + k]] = lo + step * (k + 1)
        return True
