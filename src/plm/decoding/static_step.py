"""One-token decoding steps of fixed shapes over a static KV cache, replayed as a CUDA graph on a GPU.

A one-token step of GPT-2 124M launches about 200 small kernels; at batch 1 on a GPU
their launches, not the arithmetic or the weights' bytes, bound it. A CUDA graph
records the launches once and replays them in one call, but it replays the same
kernels on the same memory: the step must have the same shapes every time and take
its inputs from buffers it owns. So the cache turns static (every step writes one
position, chosen by a tensor, and attends over all positions, the unwritten ones
masked: [`make_static`][plm.core.attention.KVCache.make_static]), and the token, the position and the
mask live in this object's buffers, which each step refills before the replay.
On the CPU the same step runs eagerly, which is what the tests compare.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from plm.core.attention import KVCache

# token (batch, 1), mask (batch, max_length), position_ids (batch, 1), caches -> (batch, vocab) logits
StepFunction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, Sequence[KVCache]], torch.Tensor]


class StaticStep:
    """The one-token steps after a prompt's pass, over caches that turn static here.

    Args:
        step: runs the model on one token per row and returns its logits (see ``StepFunction``).
        caches: the prompt's filled caches, one per layer (``length`` = the prompt's length).
        prompt_mask: (batch, max_length) 1 at the prompt's real tokens and at every position after
            the prompt, 0 at its left padding; None when nothing is padded.
        graph: capture the step as a CUDA graph at its first call (the caches must be on a GPU).
    """

    def __init__(
        self, step: StepFunction, caches: Sequence[KVCache], prompt_mask: torch.Tensor | None, graph: bool
    ) -> None:
        keys = caches[0].keys
        batch, device, written = keys.shape[0], keys.device, caches[0].length
        self.step, self.caches, self.graph = step, caches, graph
        self.slot = torch.zeros(1, dtype=torch.long, device=device)
        for cache in caches:
            cache.make_static(self.slot)
        self.token = torch.zeros(batch, 1, dtype=torch.long, device=device)
        self.position = torch.zeros(batch, 1, dtype=torch.long, device=device)
        if prompt_mask is None:
            self.mask = torch.ones(batch, caches[0].max_length, dtype=torch.long, device=device)
        else:
            self.mask = prompt_mask.to(device=device, dtype=torch.long, copy=True)
        # A left-padded row's positions count its real tokens only (as build_position_ids does).
        self.padding = written - self.mask[:, :written].sum(-1, keepdim=True)  # (batch, 1)
        self.mask[:, written:] = 0  # nothing written there yet
        self.cuda_graph: torch.cuda.CUDAGraph | None = None
        self.logits: torch.Tensor | None = None  # the graph's output buffer

    def __call__(self, token: torch.Tensor, slot: int) -> torch.Tensor:
        """The logits after ``token`` (batch, 1), stored at position ``slot`` of the caches.

        Args:
            token: (batch, 1) each row's newest token.
            slot: its position in the caches (the number of tokens before it, padding included).

        Returns:
            (batch, vocab) the next token's logits.
        """
        self.token.copy_(token)
        self.slot.fill_(slot)
        self.mask[:, slot] = 1
        torch.sub(self.slot, self.padding, out=self.position)
        if not self.graph:
            logits = self.run()
        else:
            if self.cuda_graph is None:
                self.capture()
            assert self.cuda_graph is not None and self.logits is not None
            self.cuda_graph.replay()
            logits = self.logits.clone()  # the graph's buffer: the next replay overwrites it
        for cache in self.caches:
            cache.length = slot + 1
        return logits

    def run(self) -> torch.Tensor:
        """One eager step on the buffers."""
        return self.step(self.token, self.mask, self.position, self.caches)

    def capture(self) -> None:
        """Record the step as a CUDA graph, after one eager run on a side stream.

        The eager run creates the library handles and workspaces that a capture may not;
        it writes the same key and value at the same position as the replay then does.
        Autocast's cache of cast weights is off inside: a graph must not keep pointers to
        tensors that autocast frees when its block ends.
        """
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        autocast = torch.autocast(
            "cuda", dtype=torch.get_autocast_dtype("cuda"), enabled=torch.is_autocast_enabled("cuda"),
            cache_enabled=False,
        )
        with torch.cuda.stream(stream), autocast:
            self.run()
        torch.cuda.current_stream().wait_stream(stream)
        self.cuda_graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.cuda_graph), autocast:
            self.logits = self.run()
