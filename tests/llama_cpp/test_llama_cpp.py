"""A GGUF file plm writes, run by llama.cpp itself: the same logits and greedy tokens as plm's model.

llama.cpp's Python binding builds from source (some 12 minutes), so it is in the ``bench`` extra, not in the
``test`` extra that CI installs: where it is missing these tests are skipped, and benchmarks/bench_llama_cpp.py
runs the same comparison on GPT-2 124M.
"""

import pytest
import torch

from plm.decoding.generation import generate
from plm.llama_cpp import write_gguf
from plm.models.gpt import GPT, PRESETS
from plm.tokenization.tokenizer import Tokenizer

llama_cpp = pytest.importorskip("llama_cpp")
# Numbers and contractions: GPT-2's split before BPE keeps " 20245" whole, llama.cpp's other splits do not.
TEXT = "the cat sat on the mat in 1999, and the dog's 20245 logs sat on the log."


@pytest.fixture(scope="module")
def model_and_tokenizer():
    tokenizer = Tokenizer.train_bpe([TEXT] * 20, vocab_size=300)
    torch.manual_seed(0)
    model = GPT(PRESETS["gpt2-micro"]).eval()
    with torch.no_grad():
        model.token_embedding.weight.mul_(10)  # logits far enough apart that greedy decoding is not decided by rounding
        for parameter in model.parameters():
            if parameter.dim() == 1:  # norms away from their initial ones and zeros, so that a swapped pair shows
                parameter.copy_(torch.randn_like(parameter))
    return model, tokenizer


def llama(path, logits_all: bool = True):
    f32 = llama_cpp.GGML_TYPE_F32  # its KV cache too (f16 by default)
    return llama_cpp.Llama(model_path=str(path), n_ctx=64, n_threads=1, logits_all=logits_all, verbose=False,
                           type_k=f32, type_v=f32)


def test_llama_cpp_computes_plm_s_logits_from_an_f32_file(model_and_tokenizer, tmp_path):
    model, tokenizer = model_and_tokenizer
    prompt = tokenizer.encode(TEXT)
    llm = llama(write_gguf(model, tokenizer, tmp_path / "m.gguf", "f32"))
    llm.eval(prompt)
    theirs = torch.tensor(llm.scores[: len(prompt)])
    with torch.no_grad():
        ours = model(torch.tensor([prompt])).logits[0]
    assert (theirs - ours).abs().max() < 1e-4
    assert llm.tokenize(TEXT.encode(), add_bos=False) == prompt  # llama.cpp's tokenizer reads the file's vocabulary


def test_llama_cpp_decodes_plm_s_greedy_tokens(model_and_tokenizer, tmp_path):
    model, tokenizer = model_and_tokenizer
    prompt = tokenizer.encode("the dog sat")
    llm = llama(write_gguf(model, tokenizer, tmp_path / "m.gguf", "f32"), logits_all=False)
    theirs = []
    for token in llm.generate(prompt, temp=0.0, top_k=1, repeat_penalty=1.0):
        theirs.append(token)
        if len(theirs) == 24:
            break
    ours = generate(model, torch.tensor([prompt]), 24)[0, len(prompt):].tolist()
    assert theirs == ours
