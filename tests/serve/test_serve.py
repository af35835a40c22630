"""plm serve: every endpoint gives what the library gives, every bad request is one line, batching changes no token."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import torch
from starlette.testclient import TestClient

import plm
from plm.apps.attention_map import self_attention
from plm.apps.text_pipelines import embed_texts, fill_mask
from plm.apps.translation import load_seq2seq
from plm.cli.main import main
from plm.core import attention_weights
from plm.data.dates import date_pairs
from plm.data.sentence_pairs import Seq2SeqTokenizers
from plm.decoding import GenerationConfig, generate
from plm.models import RNNConfig, RNNSeq2Seq, from_preset
from plm.objectives.translation import recipe_decoding, translate, translate_ids
from plm.serve import BackgroundServer, create_app, load_service, service_names
from plm.serve import batching as batching_module
from plm.serve.served_models import TaskService
from plm.tasks import task_model
from plm.tasks.readers import ChoiceExample, QAExample, TaggedSentence, TextExample
from plm.tasks.task_objective import run as predict
from plm.tokenization.characters import split_words
from plm.tokenization.tokenizer import Tokenizer, train_words
from tests.conftest import synthetic_text
from tests.hf.test_hf_fsmt import hf_fsmt
from tests.hf.test_hf_marian import hf_marian
from tests.tokenization.test_released_tokenizers import write_fsmt_tokenizer, write_marian_tokenizer

NAMES = ("gpt", "bert", "dates", "rnn", "elmo", "clf", "tagger", "qa", "choice")
PROMPTS = ["The cat", "a dog likes the", "", "My friend builds every token and the list", "the"]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random model of every kind, saved as plm saves models: GPT, BERT (with its MLM head), a Transformer
    and an RNN with attention on dates, ELMo, and task models on the BERT (classify, tag, qa, choice)."""
    root = tmp_path_factory.mktemp("serve")
    torch.manual_seed(0)
    text = synthetic_text(50)
    bpe = Tokenizer.train_bpe([text], 300)
    gpt = from_preset("gpt2-micro", vocab_size=len(bpe))
    gpt.init_weights(std=0.3)  # far from uniform: clear-cut greedy choices, continuations that vary
    plm.save(gpt, root / "gpt", bpe)
    wordpiece = Tokenizer.train_wordpiece([text], 200)
    bert = from_preset("bert-micro", vocab_size=len(wordpiece), pretraining_heads=("mlm",))
    plm.save(bert, root / "bert", wordpiece)
    plm.save(task_model(bert, "classify", labels=2, label_names=("bad", "good")), root / "clf", wordpiece)
    plm.save(task_model(bert, "tag", labels=3, label_names=("O", "B-X", "I-X")), root / "tagger", wordpiece)
    plm.save(task_model(bert, "span"), root / "qa", wordpiece)
    plm.save(task_model(bert, "choice"), root / "choice", wordpiece)
    tokenizers = Seq2SeqTokenizers.train(date_pairs(50, seed=0), vocab_size=300)
    rnn = RNNSeq2Seq(RNNConfig(vocab_size=len(tokenizers.source), embedding_dim=8, hidden_dim=16, layers=1,
                               attention="general", input_feeding=True))
    for name, model in (("dates", from_preset("transformer-micro", vocab_size=len(tokenizers.source))), ("rnn", rnn)):
        plm.save(model, root / name)
        tokenizers.save(root / name)
    words = train_words([text], vocab_size=60)
    plm.save(from_preset("elmo-micro", vocab_size=len(words)), root / "elmo", words)
    return root


@pytest.fixture(scope="module")
def services(model_dirs: Path) -> dict:
    return {name: load_service(model_dirs / name, name, "cpu") for name in NAMES}


@pytest.fixture(scope="module")
def client(services: dict) -> TestClient:
    with TestClient(create_app(list(services.values()))) as client:
        yield client


def post(client: TestClient, path: str, **body) -> dict:
    response = client.post(path, json=body)
    assert response.status_code == 200, response.text
    return response.json()


# --- what is loaded ------------------------------------------------------------------------------


def test_health_and_models_say_each_models_kind_and_what_it_serves(client: TestClient) -> None:
    assert client.get("/health").json() == {"status": "ok", "models": list(NAMES)}
    described = {m["name"]: (m["family"], m["kind"], m["capabilities"]) for m in client.get("/models").json()["models"]}
    assert described == {
        "gpt": ("gpt", "causal LM", ["generate", "attention"]),
        "bert": ("bert", "encoder", ["fill-mask", "embed", "attention"]),
        "dates": ("transformer", "encoder-decoder", ["translate", "attention"]),
        "rnn": ("rnn", "encoder-decoder", ["translate", "attention"]),
        "elmo": ("elmo", "ELMo", ["embed"]),
        "clf": ("task", "task model", ["classify", "attention"]),
        "tagger": ("task", "task model", ["classify", "attention"]),
        "qa": ("task", "task model", ["classify", "attention"]),
        "choice": ("task", "task model", ["classify", "attention"]),
    }


def test_an_encoder_without_its_masked_lm_head_does_not_offer_fill_mask(model_dirs: Path, tmp_path: Path) -> None:
    bert, tokenizer = plm.load_pretrained(model_dirs / "bert")
    plm.save(from_preset("bert-micro", vocab_size=bert.config.vocab_size), tmp_path / "bare", tokenizer)
    assert load_service(tmp_path / "bare", "bare").capabilities == ["embed", "attention"]


def test_a_models_name_is_its_directorys_and_a_second_of_a_name_is_numbered() -> None:
    assert service_names(["runs/gpt", "other/gpt/", "runs/bert", "x/gpt"]) == ["gpt", "gpt-2", "bert", "gpt-3"]


# --- generation ----------------------------------------------------------------------------------


@pytest.mark.parametrize("prompt", PROMPTS)
def test_greedy_generation_gives_the_tokens_of_plm_generate(prompt: str, client: TestClient, services: dict,
                                                            model_dirs: Path, capsys: pytest.CaptureFixture) -> None:
    answer = post(client, "/generate", model="gpt", prompt=prompt, max_new_tokens=12)
    assert main(["generate", "--model", str(model_dirs / "gpt"), prompt, "--max-new-tokens", "12"]) == 0
    assert capsys.readouterr().out == prompt + answer["text"] + "\n"
    # the same ids as the library's generate on the prompt as plm generate encodes it
    gpt = services["gpt"]
    start = gpt.tokenizer.bos_id if gpt.tokenizer.bos_id is not None else gpt.tokenizer.eos_id
    ids = gpt.tokenizer.encode(prompt) or [start]
    expected = generate(gpt.model, torch.tensor([ids]), 12, eos_token_id=gpt.tokenizer.eos_id)[0, len(ids):].tolist()
    got = [token["id"] for token in answer["tokens"]]
    assert got == expected[: len(got)] and (len(got) == 12 or got[-1] == gpt.tokenizer.eos_id)
    assert "".join(token["text"] for token in answer["tokens"]) == answer["text"]


def test_each_tokens_logprob_is_the_models_log_probability_of_it(client: TestClient, services: dict) -> None:
    answer = post(client, "/generate", model="gpt", prompt="The cat", max_new_tokens=6, temperature=0.7, seed=3)
    gpt = services["gpt"]
    ids = gpt.tokenizer.encode("The cat") + [token["id"] for token in answer["tokens"]]
    with torch.no_grad():
        logprobs = gpt.model(torch.tensor([ids])).logits[0].log_softmax(-1)  # (time, vocab), before any temperature
    prompt = len(ids) - len(answer["tokens"])
    expected = [logprobs[prompt - 1 + i, token].item() for i, token in enumerate(ids[prompt:])]
    assert [token["logprob"] for token in answer["tokens"]] == pytest.approx(expected, abs=1e-4)


def test_a_seed_makes_sampling_repeatable(client: TestClient) -> None:
    body = {"model": "gpt", "prompt": "The cat", "max_new_tokens": 10, "top_k": 20, "temperature": 1.5}
    first, again = (post(client, "/generate", **body, seed=1) for _ in range(2))
    assert first == again and first != post(client, "/generate", **body, seed=2)


def server_sent_events(text: str) -> list[tuple[str, dict]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n"))
        events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_streaming_sends_an_event_per_token_then_the_whole_text(client: TestClient) -> None:
    body = {"model": "gpt", "prompt": "a dog likes the", "max_new_tokens": 8}
    response = client.post("/generate", json={**body, "stream": True})
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
    events = server_sent_events(response.text)
    whole = post(client, "/generate", **body)
    assert [kind for kind, _ in events] == ["token"] * len(whole["tokens"]) + ["done"]
    assert [data for _, data in events[:-1]] == whole["tokens"] and events[-1][1] == whole


def test_concurrent_requests_are_batched_and_give_the_tokens_they_get_one_at_a_time(
    services: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompts of different lengths, different max_new_tokens, and among the greedy requests two sampled ones with
    seeds, each drawing from its own generator, batched or not."""
    requests = [{"prompt": p, "max_new_tokens": 4 + 3 * i} for i, p in enumerate(PROMPTS * 2)]
    requests += [{"prompt": "The cat", "max_new_tokens": 8, "top_p": 0.9, "seed": seed} for seed in (5, 6)]
    with TestClient(create_app([services["gpt"]], max_batch=1)) as one_at_a_time:
        alone = [post(one_at_a_time, "/generate", **body) for body in requests]

    sizes = []
    decode = batching_module.decode_batch
    monkeypatch.setattr(batching_module, "decode_batch", lambda jobs: (sizes.append(len(jobs)), decode(jobs)))

    async def all_at_once(url: str) -> list[dict]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            answers = await asyncio.gather(*(http.post("/generate", json=body) for body in requests))
        return [answer.json() for answer in answers]

    with BackgroundServer(create_app([services["gpt"]], max_batch=8, batch_window=0.05)) as server:
        together = asyncio.run(all_at_once(server.url))
    for batched, single in zip(together, alone):  # the same tokens; their log-probabilities to rounding
        assert batched["text"] == single["text"]
        assert [(t["id"], t["text"]) for t in batched["tokens"]] == [(t["id"], t["text"]) for t in single["tokens"]]
        assert [t["logprob"] for t in batched["tokens"]] == pytest.approx([t["logprob"] for t in single["tokens"]],
                                                                          abs=1e-4)
    assert max(sizes) > 1 and max(sizes) <= 8 and sum(sizes) == len(requests)


def test_requests_that_fit_the_context_alone_but_not_together_decode_apart(
    services: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 50-token prompt with 5 new tokens and a 5-token prompt with 50 each fit a context of 64, but left-padded into
    one batch they would need 50 + 50 positions. Guards against admitting a request by its own prompt and new tokens
    rather than by the batch's longest prompt and most new tokens: each gets the tokens it gets alone."""
    gpt = services["gpt"]
    text = gpt.tokenizer.encode(synthetic_text(5))
    requests = [(text[:50], 5), (text[:5], 50)]
    context = gpt.model.context_length()
    assert all(len(ids) + new <= context for ids, new in requests)  # each fits alone ...
    assert max(len(ids) for ids, _ in requests) + max(new for _, new in requests) > context  # ... not together
    sizes = []
    decode = batching_module.decode_batch
    monkeypatch.setattr(batching_module, "decode_batch", lambda jobs: (sizes.append(len(jobs)), decode(jobs)))

    async def both_pending_at_once() -> list[dict]:
        with ThreadPoolExecutor(1) as model_thread:
            batcher = batching_module.Batcher(model_thread, max_batch=8, window=0)
            jobs = [batching_module.GenerationJob(gpt.model, gpt.tokenizer, ids, new, GenerationConfig())
                    for ids, new in requests]
            for job in jobs:
                batcher.submit(job)  # both wait before the batcher takes its first batch
            running = asyncio.create_task(batcher.run())
            try:
                return [await job.result() for job in jobs]
            finally:
                running.cancel()

    answers = asyncio.run(both_pending_at_once())
    eos = gpt.tokenizer.eos_id
    for (ids, new), answer in zip(requests, answers):
        alone = generate(gpt.model, torch.tensor([ids]), new, eos_token_id=eos)[0, len(ids):].tolist()
        got = [token["id"] for token in answer["tokens"]]
        assert got == alone[: len(got)] and (len(got) == new or got[-1] == eos)
    assert sizes == [1, 1]


def decoded_together(jobs: list[batching_module.GenerationJob]) -> tuple[list[dict | Exception], list[int]]:
    """Each job's answer (or the error it failed with) when all wait before the batcher takes its first batch, and
    the sizes of the batches it decoded."""
    sizes = []

    async def all_pending() -> list[dict | Exception]:
        with ThreadPoolExecutor(1) as model_thread:
            batcher = batching_module.Batcher(model_thread, max_batch=8, window=0)
            decode = batching_module.decode_batch
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(batching_module, "decode_batch", lambda jobs: (sizes.append(len(jobs)), decode(jobs)))
                for job in jobs:
                    batcher.submit(job)
                running = asyncio.create_task(batcher.run())
                try:
                    return list(await asyncio.gather(*(job.result() for job in jobs), return_exceptions=True))
                finally:
                    running.cancel()

    return asyncio.run(all_pending()), sizes


def test_each_sampled_request_draws_with_its_own_seed_batched_or_alone(services: dict) -> None:
    """Sampled requests of one kind share a batch; each draws from a generator of its own seed, so that its tokens
    are those it gets alone and those of generate(seed=...). Guards against a batch sampling with its first seed."""
    gpt = services["gpt"]
    options = GenerationConfig(top_k=20, temperature=1.5)
    prompts = [gpt.tokenizer.encode(prompt) for prompt in ("The cat", "a dog likes the", "The cat")]
    seeds = (5, 6, 7)

    def jobs() -> list[batching_module.GenerationJob]:
        return [batching_module.GenerationJob(gpt.model, gpt.tokenizer, ids, 10, options, seed)
                for ids, seed in zip(prompts, seeds)]

    together, sizes = decoded_together(jobs())
    assert sizes == [3]
    alone = [decoded_together([job])[0][0] for job in jobs()]
    eos = gpt.tokenizer.eos_id
    for ids, seed, batched, single in zip(prompts, seeds, together, alone):
        assert isinstance(batched, dict) and isinstance(single, dict)
        assert [token["id"] for token in batched["tokens"]] == [token["id"] for token in single["tokens"]]
        library = generate(gpt.model, torch.tensor([ids]), 10, config=options, seed=seed, eos_token_id=eos)
        assert [token["id"] for token in single["tokens"]] == library[0, len(ids):].tolist()[: len(single["tokens"])]
    assert together[0]["text"] != together[2]["text"]  # one prompt, two seeds: two draws


class Undecodable:
    """A tokenizer whose decode fails: a job that cannot take its tokens."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer

    def __getattr__(self, name: str) -> object:
        return getattr(self.tokenizer, name)

    def decode(self, *args: object, **kwargs: object) -> str:
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "a broken tokenizer")


def test_a_failure_in_a_batch_fails_only_the_request_that_caused_it(services: dict) -> None:
    """Past the checks a request meets: a job with a token the model does not have, one torch cannot seed, and one
    that cannot decode its tokens each share a batch with others. Those three fail; the others get the tokens they
    get alone. The first two fail the batch before any token, which is then decoded job by job; the third fails
    alone mid-batch."""
    gpt = services["gpt"]
    greedy, sampled, top_5 = GenerationConfig(), GenerationConfig(top_k=20, temperature=1.5), GenerationConfig(top_k=5)
    encode, undecodable = gpt.tokenizer.encode, Undecodable(gpt.tokenizer)

    def jobs() -> list[batching_module.GenerationJob]:
        return [batching_module.GenerationJob(gpt.model, tokenizer, ids, 6, options, seed)
                for ids, options, seed, tokenizer in (
                    (encode("The cat"), greedy, None, gpt.tokenizer), (encode("a dog"), greedy, None, gpt.tokenizer),
                    ([5, 10_000], greedy, None, gpt.tokenizer), (encode("The cat"), sampled, 2**64, gpt.tokenizer),
                    (encode("The cat"), sampled, 3, gpt.tokenizer), (encode("the list"), sampled, 4, gpt.tokenizer),
                    (encode("The cat"), top_5, 5, gpt.tokenizer), (encode("a dog"), top_5, 6, undecodable))]

    together, sizes = decoded_together(jobs())
    assert sizes == [3, 1, 1, 1, 3, 1, 1, 1, 2]  # greedy, sampled: each batch then job by job; the top-5 ones
    failed = together[2:4] + together[7:]
    assert [type(error) for error in failed] == [IndexError, ValueError, UnicodeDecodeError]
    alone = [decoded_together([job])[0][0] for job in jobs()]
    for batched, single in zip(together[:2] + together[4:7], alone[:2] + alone[4:7]):
        assert isinstance(batched, dict) and isinstance(single, dict) and batched["text"] == single["text"]
        assert [t["logprob"] for t in batched["tokens"]] == pytest.approx([t["logprob"] for t in single["tokens"]],
                                                                          abs=1e-4)


def test_a_seed_outside_64_bits_is_refused_and_the_requests_beside_it_go_on(services: dict) -> None:
    """The seed that once was a 500 for its whole batch: now refused with 400 by itself, while greedy requests sent
    at the same moment get the tokens they get alone."""
    greedy = [{"model": "gpt", "prompt": prompt, "max_new_tokens": 6} for prompt in PROMPTS]
    wrong = [("/generate", {"model": "gpt", "prompt": "The cat", "sample": True, "seed": 2**64}),
             ("/generate", {"model": "gpt", "prompt": "The cat", "seed": -(2**63) - 1}),
             ("/v1/completions", {"model": "gpt", "prompt": "The cat", "seed": 2**63})]
    with TestClient(create_app([services["gpt"]], max_batch=1)) as one_at_a_time:
        alone = [post(one_at_a_time, "/generate", **body) for body in greedy]

    async def all_at_once(url: str) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            sent = [("/generate", body) for body in greedy[:2]] + wrong + [("/generate", b) for b in greedy[2:]]
            return list(await asyncio.gather(*(http.post(path, json=body) for path, body in sent)))

    with BackgroundServer(create_app([services["gpt"]], max_batch=16, batch_window=0.1)) as server:
        answers = asyncio.run(all_at_once(server.url))
    refused = answers[2:5]
    assert [answer.status_code for answer in refused] == [400] * 3
    assert all("'seed' must be at" in json.dumps(answer.json()) for answer in refused)
    assert refused[2].json()["error"]["param"] == "seed"  # OpenAI's body
    for answer, single in zip(answers[:2] + answers[5:], alone):
        assert answer.status_code == 200 and answer.json()["text"] == single["text"]


# --- the other endpoints: what the library gives ---------------------------------------------------


def test_fill_mask_gives_each_masks_guesses_as_plm_fill_mask(client: TestClient, services: dict) -> None:
    text = "The cat [MASK] the [MASK]."
    answer = post(client, "/fill-mask", text=text, guesses=3)  # the only model with an MLM head: no "model" needed
    bert = services["bert"]
    expected = fill_mask(bert.model, bert.tokenizer, text, guesses=3)
    assert [[(g["token"], g["probability"]) for g in mask] for mask in answer["masks"]] == expected
    assert [len(mask) for mask in post(client, "/fill-mask", text=text)["masks"]] == [5, 5]  # plm fill-mask's default


def test_fill_mask_refuses_top_k_naming_guesses_which_it_was_renamed(client: TestClient) -> None:
    """top_k is /generate's sampling option; the guesses per mask are "guesses", as plm fill-mask --guesses."""
    response = client.post("/fill-mask", json={"text": "The cat [MASK] the book.", "top_k": 3})
    assert response.status_code == 400
    assert response.json()["error"] == ("/fill-mask has no field 'top_k': it is now 'guesses' ('top_k' is /generate's, "
                                        "which samples among the k likeliest tokens)")


def test_embed_gives_plm_embeds_vectors_and_elmo_a_mixed_unit_vector_per_text(client: TestClient,
                                                                              services: dict) -> None:
    texts = ["The cat reads the book.", "A dog likes a value.", "the"]
    answer = post(client, "/embed", model="bert", texts=texts)
    bert = services["bert"]
    vectors = embed_texts(bert.model, bert.tokenizer, texts)
    torch.testing.assert_close(torch.tensor(answer["vectors"]), vectors)
    torch.testing.assert_close(torch.tensor(answer["similarity"]), vectors @ vectors.T)
    elmo = post(client, "/embed", model="elmo", texts=texts)
    sentences = [split_words(text) for text in texts]
    layers = services["elmo"].model.embed(sentences)  # (texts, L + 1, words, dim), padding 0
    mean = layers.mean(1).sum(1) / torch.tensor([len(words) for words in sentences])[:, None]
    torch.testing.assert_close(torch.tensor(elmo["vectors"]), mean / mean.norm(dim=-1, keepdim=True))


def test_translate_gives_plm_translates_translation_and_the_attention_that_made_it(
    client: TestClient, services: dict
) -> None:
    source = "4 July 1976"
    for name in ("dates", "rnn"):
        service = services[name]
        answer = post(client, "/translate", model=name, text=source, beam=2)
        options = recipe_decoding(service.model.family, num_beams=2)
        assert answer["translation"] == translate(service.model, service.tokenizers, [source], options)[0]
        [source_ids] = service.tokenizers.encode_sources([source])
        [target_ids] = translate_ids(service.model, service.tokenizers, [source], options)
        with torch.no_grad(), attention_weights(service.model) as recorded:
            output = service.model(torch.tensor([source_ids]), torch.tensor([target_ids[:-1]]))
            cross = [weights for layer, weights in recorded.items() if "cross" in layer]
        # an RNN's one attention; a Transformer's last layer of encoder-decoder attention, its heads averaged
        expected = output.attentions[0] if name == "rnn" else cross[-1][0].mean(0)
        torch.testing.assert_close(torch.tensor(answer["attention"]), expected)
        assert (len(answer["target_tokens"]), len(answer["source_tokens"])) == tuple(expected.shape)


@pytest.fixture(scope="module")
def released_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A tiny random Marian and FSMT model, each saved by transformers with small tokenizers of its own kind beside
    it, as the released ones are on the Hub (tests/hf builds them; their tokenizers learn from Multi30k)."""
    root = tmp_path_factory.mktemp("released")
    (root / "opus-mt").mkdir()
    hf_marian(vocab_size=write_marian_tokenizer(root / "opus-mt", vocab_size=100, lines=300)).save_pretrained(
        root / "opus-mt")
    (root / "wmt19").mkdir()
    sizes = write_fsmt_tokenizer(root / "wmt19", merges=300, lines=300)
    hf_fsmt(src_vocab_size=sizes[0], tgt_vocab_size=sizes[1]).save_pretrained(root / "wmt19")
    return {"opus-mt": root / "opus-mt", "wmt19": root / "wmt19"}


@pytest.mark.parametrize("name", ["opus-mt", "wmt19"])
def test_a_released_marian_or_fsmt_model_translates_as_plm_translate_does(name: str, released_dirs: dict) -> None:
    source = "Ein Mann fährt Fahrrad."
    with TestClient(create_app([load_service(released_dirs[name], name, "cpu")])) as client:
        described = client.get("/models").json()["models"][0]
        answer = post(client, "/translate", text=source)
        attention = post(client, "/attention", text=source, layer=-1, head=None)
    assert (described["kind"], described["capabilities"]) == ("encoder-decoder", ["translate", "attention"])
    model, tokenizers = load_seq2seq(released_dirs[name])
    assert answer["translation"] == translate(model, tokenizers, [source])[0]
    [source_ids] = tokenizers.encode_sources([source])
    [target_ids] = translate_ids(model, tokenizers, [source])
    with torch.no_grad(), attention_weights(model) as recorded:
        model(torch.tensor([source_ids]), torch.tensor([target_ids[:-1]]))
        expected = [weights for layer, weights in recorded.items() if "cross" in layer][-1][0].mean(0)
    torch.testing.assert_close(torch.tensor(answer["attention"]), expected)  # the last layer's, heads averaged
    assert (len(answer["target_tokens"]), len(answer["source_tokens"])) == tuple(expected.shape)
    assert len(attention["source_tokens"]) == len(source_ids) and attention["layers"] == 2


def test_an_rnn_without_attention_translates_and_says_it_has_no_attention_to_show(
    model_dirs: Path, tmp_path: Path
) -> None:
    """Cho et al.'s context vector reads no source token at a step: no heatmap, and no /attention either."""
    tokenizers = Seq2SeqTokenizers.load(model_dirs / "rnn")
    plain = RNNSeq2Seq(RNNConfig(vocab_size=len(tokenizers.source), embedding_dim=8, hidden_dim=16, layers=1,
                                 attention="none", input_feeding=False))
    plm.save(plain, tmp_path / "plain")
    tokenizers.save(tmp_path / "plain")
    service = load_service(tmp_path / "plain", "plain", "cpu")
    with TestClient(create_app([service])) as client:
        answer = post(client, "/translate", text="4 July 1976")
        options = recipe_decoding(service.model.family)
        assert answer["translation"] == translate(service.model, tokenizers, ["4 July 1976"], options)[0]
        assert answer["attention"] is None
        assert client.get("/models").json()["models"][0]["capabilities"] == ["translate"]
        refused = client.post("/attention", json={"text": "4 July 1976"})
        assert refused.status_code == 400 and "no model on this server serves /attention" in refused.json()["error"]


def test_classify_gives_plm_predicts_prediction_with_its_probabilities(client: TestClient, services: dict) -> None:
    """Every task answers its "prediction", the key plm predict writes it under ("label" is an example's gold one)."""
    clf = services["clf"]
    answer = post(client, "/classify", model="clf", text="The cat reads the book.")
    [label], _ = predict(clf.model, clf.task, [TextExample("The cat reads the book.")])
    assert set(answer) == {"prediction", "probabilities"}  # no "label"
    assert answer["prediction"] == label and set(answer["probabilities"]) == {"bad", "good"}
    assert sum(answer["probabilities"].values()) == pytest.approx(1)
    assert max(answer["probabilities"], key=answer["probabilities"].get) == label
    tagger = services["tagger"]
    sentence = TaggedSentence(("The", "cat", "reads", "the", "book", "."), ())
    [expected], _ = predict(tagger.model, tagger.task, [sentence])
    tags = post(client, "/classify", model="tagger", text="The cat reads the book .")
    assert set(tags) == {"words", "prediction"}  # no "tags": a CoNLL sentence's gold ones in plm predict's lines
    assert tags["words"] == list(sentence.words) and tags["prediction"] == expected
    qa = services["qa"]
    question, context = "Who reads the book?", "The cat reads the book. A dog likes a value."
    [expected], _ = predict(qa.model, qa.task, [QAExample("q", question, context, ())])
    answer = post(client, "/classify", model="qa", question=question, context=context)
    assert set(answer) == {"prediction", "candidates"}
    assert answer["prediction"] == expected and answer["candidates"][0]["text"] == expected
    choice = services["choice"]
    example = ChoiceExample("The cat reads", "", ("the book.", "a value.", "every token."), None)
    [expected], _ = predict(choice.model, choice.task, [example])
    answer = post(client, "/classify", model="choice", context=example.context, endings=list(example.endings))
    assert set(answer) == {"prediction", "probabilities"}
    assert answer["prediction"] == expected and len(answer["probabilities"]) == 3
    probabilities = answer["probabilities"]
    assert sum(probabilities) == pytest.approx(1) and max(probabilities) == probabilities[expected]


def test_a_regressors_prediction_is_its_score_as_plm_predict_writes_it(services: dict) -> None:
    bert = services["bert"]
    regressor = TaskService("regressor", task_model(bert.model, "classify", labels=1), bert.tokenizer)
    [expected], _ = predict(regressor.model, regressor.task, [TextExample("The cat reads the book.")])
    with TestClient(create_app([regressor])) as client:
        answer = post(client, "/classify", text="The cat reads the book.")
    assert regressor.task.name == "regress" and answer == {"prediction": pytest.approx(expected)}  # no "score"


def test_attention_gives_plm_attentions_map_of_a_layer_and_head_or_their_mean(client: TestClient,
                                                                              services: dict) -> None:
    for name in ("gpt", "bert", "clf"):
        service = services[name]
        text = "The cat reads the book."
        expected = self_attention(service.model, service.tokenizer, text, layer=1, head=1)
        answer = post(client, "/attention", model=name, text=text, layer=1, head=1)
        torch.testing.assert_close(torch.tensor(answer["attention"]), expected.weights)
        assert answer["source_tokens"] == answer["target_tokens"] == expected.columns
        assert (answer["layers"], answer["heads"]) == (2, 2)
        heads = [torch.tensor(post(client, "/attention", model=name, text=text, layer=1, head=head)["attention"])
                 for head in (0, 1)]
        mean = post(client, "/attention", model=name, text=text, layer=1, head=None)
        torch.testing.assert_close(torch.tensor(mean["attention"]), (heads[0] + heads[1]) / 2)


# --- bad requests: one line, the right status, and the server goes on ------------------------------

BAD_REQUESTS = {
    "malformed JSON": ("/generate", b'{"prompt": ', "malformed JSON"),
    "not an object": ("/generate", b'["The cat"]', 'must be a JSON object, got the list ["The cat"]'),
    "NaN": ("/generate", b'{"model": "gpt", "prompt": "x", "temperature": NaN}', "NaN is not a JSON number"),
    "missing field": ("/generate", {"model": "gpt"}, "missing field 'prompt' (a string)"),
    "ill-typed field": ("/generate", {"model": "gpt", "prompt": 3}, "'prompt' must be a string, got the number 3"),
    "a float for an integer": ("/generate", {"model": "gpt", "prompt": "x", "max_new_tokens": 2.5},
                               "'max_new_tokens' must be an integer"),
    "a bool for an integer": ("/fill-mask", {"text": "[MASK]", "guesses": True},
                              "'guesses' must be an integer, got true"),
    "unknown field": ("/generate", {"model": "gpt", "prompt": "x", "max_tokens": 5},
                      "/generate has no field 'max_tokens'"),
    "unknown model": ("/generate", {"model": "gpt5", "prompt": "x"}, "unknown model 'gpt5'; this server has gpt, bert"),
    "model not a string": ("/generate", {"model": 1, "prompt": "x"}, "'model' must be a string"),
    "wrong kind": ("/fill-mask", {"model": "gpt", "text": "[MASK]"},
                   "model 'gpt' (causal LM, family gpt) cannot serve /fill-mask, which needs an encoder"),
    "several models, none named": ("/embed", {"texts": ["x"]}, "2 models serve /embed (bert, elmo); say which"),
    "prompt longer than the context": ("/generate", {"model": "gpt", "prompt": "cat " * 80},
                                       "leaves no room for new ones in the model's context of 64"),
    "too many new tokens": ("/generate", {"model": "gpt", "prompt": "The cat", "max_new_tokens": 64},
                            "'max_new_tokens' 64 does not fit"),
    "max_new_tokens 0": ("/generate", {"model": "gpt", "prompt": "x", "max_new_tokens": 0},
                         "'max_new_tokens' must be at least 1, got 0"),
    "temperature 0": ("/generate", {"model": "gpt", "prompt": "x", "temperature": 0}, "temperature must be a positive"),
    "top_p above 1": ("/generate", {"model": "gpt", "prompt": "x", "top_p": 1.5}, "top_p must be in (0, 1]"),
    "no mask": ("/fill-mask", {"text": "The cat"}, "the text has no mask token; write [MASK]"),
    "guesses past the vocabulary": ("/fill-mask", {"text": "[MASK]", "guesses": 10**6},
                                    "'guesses' must be between 1 and the vocabulary's"),
    "no guesses": ("/fill-mask", {"text": "[MASK]", "guesses": 0}, "'guesses' must be at least 1, got 0"),
    "layer out of range": ("/attention", {"model": "bert", "text": "x", "layer": 2}, "layer 2 is out of range"),
    "negative layer": ("/attention", {"model": "bert", "text": "x", "layer": -3}, "layer -3 is out of range"),
    "head out of range": ("/attention", {"model": "gpt", "text": "x", "head": 2}, "head 2 is out of range"),
    "text longer than the context": ("/attention", {"model": "gpt", "text": "cat " * 80}, "the model's context is 64"),
    "a target for one text": ("/attention", {"model": "bert", "text": "x", "target": "y"},
                              "'target' is for encoder-decoders"),
    "beam past the vocabulary": ("/translate", {"model": "dates", "text": "x", "beam": 10**5}, "'beam' 100000 is more"),
    "a question for a classifier": ("/classify", {"model": "clf", "question": "why?"},
                                    "a classify model reads 'text', 'text_pair'; missing 'text'"),
    "no question for qa": ("/classify", {"model": "qa", "context": "The cat."}, "missing 'question'"),
    "empty text to classify": ("/classify", {"model": "clf", "text": " "}, "'text' is empty"),
    "empty context for qa": ("/classify", {"model": "qa", "question": "who?", "context": ""}, "'context' is empty"),
    "an empty list": ("/embed", {"model": "bert", "texts": []}, "'texts' must be a non-empty list of strings"),
    "elmo, no words": ("/embed", {"model": "elmo", "texts": ["x", "  "]}, "text 2 has no words"),
}


@pytest.mark.parametrize("path, body, message", BAD_REQUESTS.values(), ids=BAD_REQUESTS.keys())
def test_a_bad_request_is_a_400_with_one_line_saying_why(path: str, body, message: str, client: TestClient) -> None:
    response = client.post(path, content=body) if isinstance(body, bytes) else client.post(path, json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert message in error and "\n" not in error and "Traceback" not in error
    assert client.get("/health").status_code == 200


def test_a_body_over_max_body_is_a_413_whether_its_length_is_declared_or_not(services: dict) -> None:
    with TestClient(create_app([services["gpt"]], max_body=100)) as client:
        body = json.dumps({"prompt": "x" * 200}).encode()
        declared = client.post("/generate", content=body)
        streamed = client.post("/generate", content=iter([body[:60], body[60:]]))  # chunked: no Content-Length
        assert declared.status_code == streamed.status_code == 413
        assert "at most 100" in declared.json()["error"] and "over 100 bytes" in streamed.json()["error"]
        assert post(client, "/generate", prompt="x", max_new_tokens=1)["tokens"]


def test_a_body_of_exactly_max_body_bytes_is_taken_and_one_byte_more_is_a_413(services: dict) -> None:
    # Guards against an off-by-one in either check (declared length, counted chunks): "at most max_body bytes".
    body = json.dumps({"prompt": "x", "max_new_tokens": 1}).encode()
    chunked = [body[:10], body[10:]]  # no Content-Length: the chunks are counted
    with TestClient(create_app([services["gpt"]], max_body=len(body))) as client:
        assert client.post("/generate", content=body).status_code == 200
        assert client.post("/generate", content=iter(chunked)).status_code == 200
    with TestClient(create_app([services["gpt"]], max_body=len(body) - 1)) as client:
        assert client.post("/generate", content=body).status_code == 413
        assert client.post("/generate", content=iter(chunked)).status_code == 413


def test_unknown_paths_and_methods_are_json_errors(client: TestClient) -> None:
    assert (client.get("/nowhere").status_code, client.get("/nowhere").json()) == (404, {"error": "Not Found"})
    assert client.get("/generate").status_code == 405 and "error" in client.get("/generate").json()


def test_an_unforeseen_error_is_a_500_with_one_line_and_the_server_goes_on(
    client: TestClient, services: dict, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(services["bert"], "fill_mask", lambda **_: {}["a bug"])
    response = client.post("/fill-mask", json={"text": "[MASK]"})
    assert response.status_code == 500
    assert response.json() == {"error": "internal error (KeyError: 'a bug'); the server's log has the traceback"}
    monkeypatch.setattr(services["gpt"].model, "decode_step", lambda *_: 1 / 0)  # in the batch, on the model thread
    response = client.post("/generate", json={"model": "gpt", "prompt": "x", "stream": True})
    assert server_sent_events(response.text)[-1] == ("error", {"error": "internal error (ZeroDivisionError: division "
                                                               "by zero); the server's log has the traceback"})
    assert client.post("/generate", json={"model": "gpt", "prompt": "x"}).status_code == 500
    monkeypatch.undo()
    assert post(client, "/generate", model="gpt", prompt="x", max_new_tokens=2)["tokens"]


def test_the_server_answers_while_a_model_works(services: dict, monkeypatch: pytest.MonkeyPatch) -> None:
    """Model work runs on its own thread: /health is answered while a request holds the model."""
    release, working = threading.Event(), threading.Event()

    def slow_embed(texts: list[str]) -> dict:
        working.set()
        release.wait(10)
        return {"vectors": []}

    monkeypatch.setattr(services["bert"], "embed", slow_embed)
    with BackgroundServer(create_app([services["bert"]])) as server:
        slow = threading.Thread(target=httpx.post, args=(f"{server.url}/embed",), kwargs={"json": {"texts": ["x"]}})
        slow.start()
        assert working.wait(10)
        assert httpx.get(f"{server.url}/health", timeout=2).json()["status"] == "ok"
        release.set()
        slow.join()


# --- load: many clients for a bounded time, on loopback -------------------------------------------


def resident_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        return int(next(line for line in status if line.startswith("VmRSS:")).split()[1]) * 1024


def test_a_client_that_keeps_its_connection_gets_each_answer_at_once(services: dict) -> None:
    """Guards against Nagle's algorithm on the server's connections: the body of each answer would wait for the
    client to acknowledge its headers, which a kept-alive client delays by 40 ms (the openai client keeps them)."""
    with BackgroundServer(create_app([services["gpt"]])) as server, httpx.Client(base_url=server.url) as http:
        times = []
        for _ in range(15):
            start = time.perf_counter()
            assert http.get("/health").status_code == 200
            times.append(time.perf_counter() - start)
    assert sorted(times)[len(times) // 2] < 0.02  # the median; 0.04 and more when held back


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the resident memory from /proc (Linux)")
def test_32_clients_for_a_few_seconds_lose_no_request_and_memory_stays_flat(services: dict) -> None:
    """32 concurrent clients send generation requests for 2 x 1.5 s: every one is answered with 200 and the
    resident memory grows by less than 30 MB from the first half to the second (a server that kept each request's
    state grows with every request). ``PLM_LOAD_SECONDS=15`` makes it the 30-second load test."""
    clients, seconds = 32, float(os.environ.get("PLM_LOAD_SECONDS", 1.5))

    async def load(url: str) -> tuple[int, int]:
        sent = answered = 0
        stop = time.monotonic() + seconds

        async def client(http: httpx.AsyncClient, number: int) -> None:
            nonlocal sent, answered
            while time.monotonic() < stop:
                sent += 1
                response = await http.post("/generate", json={"prompt": PROMPTS[number % 5], "max_new_tokens": 8})
                answered += response.status_code == 200 and len(response.json()["tokens"]) >= 1

        limits = httpx.Limits(max_connections=clients)
        async with httpx.AsyncClient(base_url=url, timeout=30, limits=limits) as http:
            await asyncio.gather(*(client(http, number) for number in range(clients)))
        return sent, answered

    with BackgroundServer(create_app([services["gpt"]], max_batch=32)) as server:
        first = asyncio.run(load(server.url))
        before = resident_bytes()
        second = asyncio.run(load(server.url))
        after = resident_bytes()
    for sent, answered in (first, second):
        assert sent == answered and answered > clients
    assert after - before < 30 * 2**20, f"resident memory grew by {(after - before) / 2**20:.1f} MB"


# --- the command ---------------------------------------------------------------------------------


@pytest.fixture
def broken_models(model_dirs: Path, tmp_path: Path) -> Path:
    shutil.copytree(model_dirs / "gpt", tmp_path / "truncated")
    weights = (model_dirs / "gpt" / "model.safetensors").read_bytes()
    (tmp_path / "truncated" / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    shutil.copytree(model_dirs / "gpt", tmp_path / "mismatched")
    config = json.loads((model_dirs / "gpt" / "config.json").read_text())
    config["config"]["vocab_size"] = 100  # the weights have more rows
    (tmp_path / "mismatched" / "config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("model, message", [
    ("nowhere", "nowhere: no such model directory"),
    ("truncated", "not a readable safetensors file, perhaps truncated"),
    ("mismatched", "weights do not fit a GPT of this config"),
])
def test_a_bad_model_is_one_line_and_exit_code_2_before_listening(
    model: str, message: str, broken_models: Path, model_dirs: Path, capsys: pytest.CaptureFixture
) -> None:
    code = main(["serve", "--model", str(model_dirs / "gpt"), "--model", str(broken_models / model), "--port", "0"])
    out, err = capsys.readouterr()
    assert code == 2 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("plm serve: error") and message in err


def test_plm_serve_serves_until_ctrl_c_which_ends_it_cleanly(model_dirs: Path) -> None:
    command = [sys.executable, "-m", "plm.cli.main", "serve", "--model", str(model_dirs / "gpt"), "--port", "0"]
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        lines = [server.stdout.readline() for _ in range(2)]
        assert lines[0] == "gpt: causal LM (gpt): /generate /attention\n", lines
        url = lines[1].split()[2].rstrip("/")
        assert url.startswith("http://127.0.0.1:")
        with httpx.stream("POST", f"{url}/generate", json={"prompt": "The cat", "stream": True}, timeout=30) as stream:
            events = stream.iter_lines()
            assert next(events) == "event: token"
            server.send_signal(signal.SIGINT)  # while the request is in flight: it is answered to the end
            rest = list(events)
        assert "event: done" in rest
        assert server.wait(30) == 0 and server.stderr.read() == ""
    finally:
        server.kill()


def test_each_batched_requests_alternatives_are_its_own_rows(services: dict) -> None:
    """Requests that ask for their step's most likely tokens share a batch: each gets those of its own prompt and
    tokens, as the model run on that row alone ranks them. Guards against the alternatives of one row of the batch
    (another request's) going to its neighbour."""
    gpt = services["gpt"]
    prompts = [gpt.tokenizer.encode(prompt) for prompt in ("The cat", "a dog likes the", "My friend builds")]
    jobs = [batching_module.GenerationJob(gpt.model, gpt.tokenizer, ids, 4, GenerationConfig(), top_logprobs=3)
            for ids in prompts]
    together, sizes = decoded_together(jobs)
    assert sizes == [3]
    for ids, answer in zip(prompts, together):
        assert isinstance(answer, dict)
        generated = [token["id"] for token in answer["tokens"]]
        with torch.no_grad():  # the oracle: this row alone, its prompt and the tokens it chose
            logprobs = gpt.model(torch.tensor([ids + generated])).logits[0].float().log_softmax(-1)
        for place, token in enumerate(answer["tokens"]):
            values, indices = logprobs[len(ids) - 1 + place].topk(3)
            assert [other["id"] for other in token["top_logprobs"]] == indices.tolist()
            assert [other["logprob"] for other in token["top_logprobs"]] == pytest.approx(values.tolist(), abs=1e-4)
