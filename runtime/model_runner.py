"""Turn a scheduler's ``StepPlan`` into one packed forward pass and the logits to sample from.

The plan says, per request, which token positions to compute
(``[num_computed_tokens, num_computed_tokens + num_new_tokens)``) and in which KV blocks they
live (``ScheduledRequest.block_table``, filled by a scheduler made with
``emit_block_tables=True``), so the runner never holds the allocator. This module only
translates the plan into tensors: token ids, positions, the KV slot of every new token, block
tables and sequence lengths. It decides nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Optional

import torch

from kernels.sdpa import SDPAPlan
from runtime.attention import AttentionMetadata, resolve_backend
from runtime.kv_cache import KVCache
from runtime.model import LlamaForCausalLM
from sim.policies import ScheduledRequest, StepPlan


@dataclass
class PreparedStep:
    input_ids: torch.Tensor
    positions: torch.Tensor
    meta: AttentionMetadata
    #: Packed rows whose logits are needed: the last token of every request that samples this
    #: step, or all ``1 + drafts`` rows of a speculative one; who they are, and how many each.
    sample_rows: torch.Tensor
    sample_requests: list[ScheduledRequest]
    sample_counts: list[int]


def _block_table_tensor(tables: list[list[int]], device: torch.device) -> torch.Tensor:
    width = max((len(t) for t in tables), default=0)
    padded = [t + [0] * (width - len(t)) for t in tables]  # kernels mask past seq_len
    return torch.tensor(padded, dtype=torch.int32).reshape(len(tables), width).to(device)


class ModelRunner:
    def __init__(self, model: LlamaForCausalLM, kv_cache: KVCache, device: torch.device,
                 attention_backend: str = "auto") -> None:
        self.model = model
        self.kv_cache = kv_cache
        self.kv_layers = kv_cache.layers()
        self.device = device
        self.block_size = kv_cache.block_size
        self.attention_backend = resolve_backend(device, attention_backend)

    def prepare(self, plan: StepPlan, drafts: Optional[Mapping[str, list[int]]] = None) -> PreparedStep:
        """Pack single-token queries first, then multi-token ones (see ``attention.py``).

        A decode verifying ``m`` draft tokens (``drafts[request_id][:m]``) is a multi-token
        query: its last known token then the drafts, causal over its cached context.
        """
        decodes: list[ScheduledRequest] = []
        prefills: list[ScheduledRequest] = []
        for s in plan.scheduled:
            if s.num_new_tokens < 1:
                raise ValueError(f"request {s.request.request_id}: scheduled {s.num_new_tokens} tokens")
            (decodes if s.num_new_tokens + s.num_spec_tokens == 1 else prefills).append(s)

        bs = self.block_size
        ids: list[int] = []
        positions: list[int] = []
        slots: list[int] = []
        tables: list[list[int]] = []
        seq_lens: list[int] = []
        cu_q = [0]
        sample_rows: list[int] = []
        sample_reqs: list[ScheduledRequest] = []
        sample_counts: list[int] = []
        for s in decodes + prefills:
            req = s.request
            start = req.num_computed_tokens
            q_len = s.num_new_tokens + s.num_spec_tokens
            end = start + q_len
            table = s.block_table
            if table is None:
                raise RuntimeError(f"request {req.request_id}: the plan carries no block table "
                                   f"(make the scheduler with emit_block_tables=True)")
            if len(table) * bs < end:
                raise RuntimeError(
                    f"request {req.request_id}: {len(table)} blocks of {bs} cannot hold {end} tokens "
                    f"(allocator and plan disagree)"
                )
            if s.num_spec_tokens:
                draft = (drafts or {}).get(req.request_id, [])[:s.num_spec_tokens]
                if len(draft) != s.num_spec_tokens:
                    raise RuntimeError(f"request {req.request_id}: {s.num_spec_tokens} draft tokens scheduled, "
                                       f"{len(draft)} proposed")
                ids.append(req.token_id(start))
                ids.extend(draft)
            elif q_len == 1:
                ids.append(req.token_id(start))
            else:
                ids.extend(req.all_token_ids()[start:end])
            positions.extend(range(start, end))
            slots.extend(table[p // bs] * bs + p % bs for p in range(start, end))
            tables.append(table)
            seq_lens.append(end)
            cu_q.append(cu_q[-1] + q_len)
            if s.samples_token:
                count = 1 + s.num_spec_tokens
                sample_rows.extend(range(len(ids) - count, len(ids)))
                sample_reqs.append(s)
                sample_counts.append(count)

        nd = len(decodes)
        dev = self.device
        prefill_cu = [c - nd for c in cu_q[nd:]]
        meta = AttentionMetadata(
            slot_mapping=torch.tensor(slots, dtype=torch.int64).to(dev),
            num_decode_tokens=nd,
            decode_block_tables=_block_table_tensor(tables[:nd], dev),
            decode_seq_lens=torch.tensor(seq_lens[:nd], dtype=torch.int32).to(dev),
            prefill_block_tables=_block_table_tensor(tables[nd:], dev),
            prefill_cu_seqlens_q=torch.tensor(prefill_cu, dtype=torch.int32).to(dev),
            prefill_seq_lens=torch.tensor(seq_lens[nd:], dtype=torch.int32).to(dev),
            num_prefill_tokens=len(ids) - nd,
            backend=self.attention_backend,
        )
        if self.attention_backend == "sdpa":
            q_lens = [b - a for a, b in zip(prefill_cu[:-1], prefill_cu[1:])]
            _, _, _, _, kv_heads, head_dim = self.kv_cache.data.shape
            meta.sdpa = SDPAPlan.build(bs, meta.slot_mapping, meta.decode_block_tables, seq_lens[:nd],
                                       meta.prefill_block_tables, q_lens, seq_lens[nd:],
                                       kv_row_elems=kv_heads * head_dim)
        return PreparedStep(
            input_ids=torch.tensor(ids, dtype=torch.int64).to(dev),
            positions=torch.tensor(positions, dtype=torch.int64).to(dev),
            meta=meta,
            sample_rows=torch.tensor(sample_rows, dtype=torch.int64).to(dev),
            sample_requests=sample_reqs,
            sample_counts=sample_counts,
        )

    @torch.inference_mode()
    def execute(self, step: PreparedStep) -> torch.Tensor:
        """Logits ``[num_sampling_requests, vocab]`` in float32 (only the rows that sample)."""
        hidden = self.model(step.input_ids, step.positions, self.kv_layers, step.meta)
        return self.model.compute_logits(hidden[step.sample_rows])
