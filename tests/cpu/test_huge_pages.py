"""Inference weights in huge pages (plm.cpu.huge_pages): the same outputs, tied weights tied, the pages really huge."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import torch

from plm.cpu import huge_pages
from plm.cpu.huge_pages import HUGE_PAGE, into_huge_pages
from plm.loading import inference_weights
from plm.models import from_preset

needs_thp = pytest.mark.skipif(not huge_pages.huge_pages_available(), reason="no transparent huge pages here")


def addresses(model: torch.nn.Module) -> dict[str, int]:
    return {name: tensor.data_ptr() for name, tensor in [*model.named_parameters(), *model.named_buffers()]}


@needs_thp
@pytest.mark.parametrize("precision, quantization", [("fp32", None), ("bf16", None), ("fp32", "int8")])
def test_the_outputs_are_the_same_bit_for_bit_and_shared_weights_stay_shared(precision, quantization,
                                                                             monkeypatch) -> None:
    """ALBERT shares its layers' weights: moved once, each shared weight is still one tensor for all its users."""
    torch.manual_seed(0)
    model = from_preset("albert-micro").eval()
    ids = torch.randint(0, model.config.vocab_size, (2, 9))
    with monkeypatch.context() as without:
        without.setattr(huge_pages, "huge_pages_available", lambda: False)
        reference = inference_weights(copy.deepcopy(model), precision, quantization)
    shared = len({t.untyped_storage().data_ptr() for t in reference.state_dict(keep_vars=True).values()})
    moved = inference_weights(model, precision, quantization)
    with torch.no_grad():
        got, want = moved(ids), reference(ids)
    # ALBERT's base model has no logits (None == None would compare nothing): its hidden states and pooled output
    for name in ("last_hidden_state", "pooler_output"):
        assert getattr(want, name) is not None, name
        torch.testing.assert_close(getattr(got, name), getattr(want, name), rtol=0, atol=0, msg=name)
    assert len({t.untyped_storage().data_ptr() for t in moved.state_dict(keep_vars=True).values()}) <= shared
    weights = [t for t in [*moved.parameters(), *moved.buffers()] if t.nbytes >= 4096]
    arenas = {t.untyped_storage().data_ptr() for t in weights}
    assert weights and len(arenas) < len(weights)  # packed together, a few arenas
    assert all(t.data_ptr() % huge_pages.ALIGNMENT == 0 for t in weights)  # int8's kernel loads aligned vectors


def test_without_huge_pages_no_weight_is_copied(monkeypatch) -> None:
    monkeypatch.setattr(huge_pages, "huge_pages_available", lambda: False)
    model = from_preset("gpt2-micro")
    before = addresses(model)
    assert addresses(into_huge_pages(model)) == before
    assert addresses(inference_weights(model, "fp32")) == before


@needs_thp
def test_the_weights_lie_in_memory_asked_for_in_huge_pages() -> None:
    """What the arenas are for: the mapping under the weights carries MADV_HUGEPAGE ("hg" in its smaps VmFlags).
    Whether the kernel then finds free 2 MiB pages (AnonHugePages) depends on the machine's memory at that moment,
    so the test asks only that they were asked for."""
    model = into_huge_pages(from_preset("gpt2-mini"))  # 13 MB of weights: several huge pages
    start = min(t.data_ptr() for t in model.parameters() if t.nbytes >= 4096)
    assert start % HUGE_PAGE == 0  # the first weight opens the first arena, at a huge page boundary
    assert "hg" in mapping_fields(start)["VmFlags"].split()


def mapping_fields(address: int) -> dict[str, str]:
    """The smaps fields (AnonHugePages, VmFlags, ...) of the mapping of this process that holds ``address``."""
    fields: dict[str, str] = {}
    inside = False
    for line in Path("/proc/self/smaps").read_text().split("\n"):
        mapping = re.match(r"^([0-9a-f]+)-([0-9a-f]+) ", line)
        if mapping:
            if inside:
                break
            inside = int(mapping[1], 16) <= address < int(mapping[2], 16)
        elif inside and ":" in line:
            name, _, value = line.partition(":")
            fields[name] = value.strip()
    return fields


@needs_thp
@pytest.mark.parametrize("nbytes", [4096, 100_000, HUGE_PAGE, HUGE_PAGE + 1, 5_000_000])
def test_an_arena_of_any_size_starts_at_a_huge_page_and_is_asked_for_whole(nbytes: int) -> None:
    """madvise covers whole huge pages; they must all lie inside the allocation (a 100 kB arena once got ENOMEM)."""
    region = huge_pages.arena(nbytes)
    assert region.numel() == nbytes and region.data_ptr() % HUGE_PAGE == 0
    assert "hg" in mapping_fields(region.data_ptr() + nbytes - 1)["VmFlags"].split()


def test_a_refused_madvise_leaves_the_weights_where_they_are(monkeypatch) -> None:
    def refused(nbytes: int) -> torch.Tensor:
        raise OSError(12, "madvise(MADV_HUGEPAGE) failed")

    monkeypatch.setattr(huge_pages, "huge_pages_available", lambda: True)
    monkeypatch.setattr(huge_pages, "arena", refused)
    model = from_preset("gpt2-micro")
    before = addresses(model)
    assert addresses(into_huge_pages(model)) == before


@needs_thp
def test_each_arena_is_asked_for_in_huge_pages_before_its_copy_and_collapsed_after(monkeypatch) -> None:
    """The first touch gets huge pages only where free ones are at hand; MADV_COLLAPSE gives the rest theirs (a
    benchmark's three GPT-2 models went from 72% of their weights in huge pages to all)."""
    advice = []
    real = huge_pages.madvise
    monkeypatch.setattr(huge_pages, "madvise", lambda region, kind: advice.append(kind) or real(region, kind))
    into_huge_pages(from_preset("gpt2-mini"))
    assert advice == [huge_pages.MADV_HUGEPAGE, huge_pages.MADV_COLLAPSE]  # one arena: 13 MB


@needs_thp
def test_tensors_that_share_memory_share_the_copy() -> None:
    """Weights tied as two tensors on one storage (not one Parameter), and a buffer that views part of a weight:
    moved together, they still share memory, so an update of one is seen by the others as before."""
    model = torch.nn.Module()
    model.first = torch.nn.Parameter(torch.randn(64, 64))
    model.second = torch.nn.Parameter(torch.empty(0))
    model.second.data = model.first.data  # tied, as a loader that assigns .data ties them
    model.register_buffer("row", model.first.data[3])  # a view: offset 192, its own shape
    expected = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    before = model.first.data_ptr()
    into_huge_pages(model)
    assert model.first.data_ptr() != before  # moved
    assert model.second.data_ptr() == model.first.data_ptr() and model.row.data_ptr() == model.first[3].data_ptr()
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, expected[name])
    with torch.no_grad():
        model.first[3, 0] = 7.0
    assert model.second[3, 0] == 7.0 and model.row[0] == 7.0
