"""ELMo's char-CNN encodes each distinct word of a batch once: the same vectors and gradients as word by word."""

from __future__ import annotations

import torch

import plm
from plm.tokenization.characters import batch_to_ids

SENTENCES = [["the", "cat", "saw", "the", "dog", "."], ["the", "dog", "ran", "."]]  # "the", "dog", "." repeat


def test_a_repeated_word_gets_the_vector_and_the_gradient_it_gets_alone() -> None:
    torch.manual_seed(0)
    model = plm.from_preset("elmo-micro")
    encoder = model.token_encoder
    chars, mask = batch_to_ids(SENTENCES)  # (2, 6, chars); the second sentence padded
    upstream = torch.randn(*chars.shape[:2], model.config.projection_dim)

    encoder.zero_grad()
    (encoder(chars) * upstream).sum().backward()
    batched = {name: p.grad.clone() for name, p in encoder.named_parameters()}

    # The oracle: every position encoded on its own, padding included, and the gradients summed.
    encoder.zero_grad()
    alone = torch.stack([torch.stack([encoder(chars[b, w][None, None])[0, 0] for w in range(chars.shape[1])])
                         for b in range(chars.shape[0])])
    (alone * upstream).sum().backward()

    torch.testing.assert_close(encoder(chars), alone)
    for name, p in encoder.named_parameters():
        torch.testing.assert_close(batched[name], p.grad, msg=name)
