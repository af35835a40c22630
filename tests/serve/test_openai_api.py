"""plm serve speaks OpenAI's protocol: the official ``openai`` client gets plm's own answers, behind an API key."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
import torch
from openai import OpenAI
from starlette.testclient import TestClient

import plm
import plm.serve.server
from plm.cli.main import main
from plm.decoding import generate
from plm.serve import BackgroundServer, create_app, load_service
from tests.conftest import synthetic_text
from tests.serve.tiny_models import save_gpt_and_bert

KEY = "sk-test-0123456789"
PROMPTS = ["The cat", "a dog likes the", "", "My friend builds every token and the list"]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random GPT (context 64) and BERT, saved as plm saves models."""
    root = tmp_path_factory.mktemp("openai")
    save_gpt_and_bert(root)
    return root


@pytest.fixture(scope="module")
def services(model_dirs: Path) -> dict:
    return {name: load_service(model_dirs / name, name, "cpu") for name in ("gpt", "bert")}


@pytest.fixture(scope="module")
def server(services: dict) -> BackgroundServer:
    with BackgroundServer(create_app(list(services.values()), api_key=KEY)) as server:
        yield server


@pytest.fixture(scope="module")
def client(server: BackgroundServer) -> OpenAI:
    return OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)


def plm_generate(model_dirs: Path, prompt: str, tokens: int, capsys: pytest.CaptureFixture) -> str:
    """What ``plm generate`` prints after the prompt (greedy)."""
    capsys.readouterr()
    assert main(["generate", "--model", str(model_dirs / "gpt"), prompt, "--max-new-tokens", str(tokens)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(prompt) and printed.endswith("\n")
    return printed[len(prompt):-1]


# --- the model list -------------------------------------------------------------------------------


def test_the_model_list_names_the_served_models_in_openais_shape(client: OpenAI, server: BackgroundServer) -> None:
    listed = client.models.list()
    assert [(m.id, m.object, m.owned_by) for m in listed.data] == [("gpt", "model", "plm"), ("bert", "model", "plm")]
    assert all(isinstance(m.created, int) and m.created > 0 for m in listed.data)
    raw = httpx.get(f"{server.url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert raw["object"] == "list" and set(raw["data"][0]) == {"id", "object", "created", "owned_by"}
    assert client.models.retrieve("bert").id == "bert"
    with pytest.raises(openai.NotFoundError) as refused:
        client.models.retrieve("gpt-4")
    assert refused.value.code == "model_not_found"


# --- completions ----------------------------------------------------------------------------------


def test_greedy_completions_are_plm_generates_text(client: OpenAI, model_dirs: Path,
                                                   capsys: pytest.CaptureFixture) -> None:
    """temperature 0 is greedy: each prompt's completion is what plm generate prints, one prompt or a list."""
    expected = [plm_generate(model_dirs, prompt, 12, capsys) for prompt in PROMPTS]
    for prompt, text in zip(PROMPTS, expected):
        answer = client.completions.create(model="gpt", prompt=prompt, max_tokens=12, temperature=0)
        assert answer.object == "text_completion" and answer.id.startswith("cmpl-") and answer.model == "gpt"
        [choice] = answer.choices
        assert (choice.text, choice.index, choice.logprobs) == (text, 0, None)
        assert choice.finish_reason == ("length" if answer.usage.completion_tokens == 12 else "stop")
        assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
    together = client.completions.create(model="gpt", prompt=PROMPTS, max_tokens=12, temperature=0)
    assert [(c.index, c.text) for c in together.choices] == list(enumerate(expected))


def test_each_tokens_logprobs_are_the_models_with_the_most_likely_alternatives(client: OpenAI,
                                                                              services: dict) -> None:
    prompt = "The cat"
    answer = client.completions.create(model="gpt", prompt=prompt, max_tokens=8, temperature=0, logprobs=3)
    [choice] = answer.choices
    logprobs = choice.logprobs
    assert "".join(logprobs.tokens) == choice.text and len(logprobs.tokens) == 8
    gpt = services["gpt"]
    ids = torch.tensor([gpt.tokenizer.encode(prompt)])
    tokens = generate(gpt.model, ids, 8)  # greedy, as temperature 0
    with torch.no_grad():
        expected = gpt.model(tokens).logits[0, ids.shape[1] - 1:-1].log_softmax(-1)  # (new tokens, vocab)
    assert logprobs.token_logprobs == pytest.approx(expected.max(-1).values.tolist(), abs=1e-4)  # the most likely
    for top, best in zip(logprobs.top_logprobs, expected):
        alternatives = best.topk(3)  # keyed by each token's text, as OpenAI's (two tokens may read alike)
        texts = [gpt.tokenizer.decode([token]) for token in alternatives.indices.tolist()]
        assert top == pytest.approx(dict(zip(texts, alternatives.values.tolist())), abs=1e-4)
    offsets = [len(prompt) + len("".join(logprobs.tokens[:i])) for i in range(8)]
    assert logprobs.text_offset == offsets


def test_a_streamed_completion_is_the_whole_one_in_chunks_then_done(client: OpenAI, server: BackgroundServer) -> None:
    body = {"model": "gpt", "prompt": "a dog likes the", "max_tokens": 10, "temperature": 0}
    whole = client.completions.create(**body, logprobs=1)
    chunks = list(client.completions.create(**body, logprobs=1, stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert [c.choices[0].finish_reason for c in chunks] == [None] * (len(chunks) - 1) + [whole.choices[0].finish_reason]
    streamed_tokens = [token for c in chunks[:-1] for token in c.choices[0].logprobs.tokens]
    assert streamed_tokens == whole.choices[0].logprobs.tokens
    assert {c.id for c in chunks} == {chunks[0].id} and chunks[0].object == "text_completion"
    with httpx.stream("POST", f"{server.url}/v1/completions", json={**body, "stream": True},
                      headers={"Authorization": f"Bearer {KEY}"}) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = response.read().decode().split("\n\n")
    assert events[-2:] == ["data: [DONE]", ""]
    assert all(event.startswith("data: {") for event in events[:-2])
    assert len(events) - 2 == len(chunks)
    usage = list(client.completions.create(**body, stream=True, stream_options={"include_usage": True}))[-1]
    assert usage.choices == [] and usage.usage.completion_tokens == whole.usage.completion_tokens


def test_streamed_text_offsets_are_the_whole_ones_advancing_with_each_tokens_text(client: OpenAI) -> None:
    prompt = "a dog likes the"
    body = {"model": "gpt", "prompt": prompt, "max_tokens": 10, "temperature": 0, "logprobs": 1}
    whole = client.completions.create(**body).choices[0].logprobs
    chunks = list(client.completions.create(**body, stream=True))
    streamed = [c.choices[0].logprobs for c in chunks if c.choices[0].logprobs is not None]
    assert [len(piece.tokens) for piece in streamed] == [1] * len(whole.tokens)  # a chunk per token
    offsets = [offset for piece in streamed for offset in piece.text_offset]
    assert offsets == whole.text_offset
    assert offsets == [len(prompt) + len("".join(whole.tokens[:i])) for i in range(len(whole.tokens))]
    assert len(set(offsets)) > 1  # they move on: the tokens are not all empty


def test_a_stop_string_ends_the_text_before_it_streamed_or_not(client: OpenAI) -> None:
    body = {"model": "gpt", "prompt": "The cat", "temperature": 0}
    free = client.completions.create(**body, max_tokens=24).choices[0].text
    stop = next(free[i:i + 3] for i in range(4, len(free)) if free[i:i + 3].strip() and free.find(free[i:i + 3]) == i)
    answer = client.completions.create(**body, max_tokens=24, stop=[stop, "never appears"])
    assert (answer.choices[0].text, answer.choices[0].finish_reason) == (free[: free.find(stop)], "stop")
    streamed = client.completions.create(**body, max_tokens=24, stop=stop, stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed) == free[: free.find(stop)]


def test_n_choices_with_a_seed_are_repeatable_and_each_their_own(client: OpenAI) -> None:
    body = {"model": "gpt", "prompt": ["The cat", "a dog"], "max_tokens": 12, "temperature": 1.5, "n": 3, "seed": 7}
    first, again = (client.completions.create(**body) for _ in range(2))
    assert [c.index for c in first.choices] == list(range(6))
    assert [c.text for c in first.choices] == [c.text for c in again.choices]
    assert len({c.text for c in first.choices[:3]}) > 1  # choice k draws with seed + k
    greedy = client.completions.create(model="gpt", prompt="The cat", max_tokens=12, temperature=0, n=2)
    assert greedy.choices[0].text == greedy.choices[1].text


def test_16_concurrent_clients_each_get_their_own_completion(client: OpenAI, server: BackgroundServer) -> None:
    words = synthetic_text(5).split()
    prompts = [" ".join(words[i:i + 1 + i % 3]) for i in range(16)]  # of 1 to 3 words
    alone = [client.completions.create(model="gpt", prompt=p, max_tokens=10, temperature=0).choices[0].text
             for p in prompts]

    def complete(prompt: str) -> str:
        own = OpenAI(base_url=f"{server.url}/v1", api_key=KEY, max_retries=0)
        return own.completions.create(model="gpt", prompt=prompt, max_tokens=10, temperature=0).choices[0].text

    with ThreadPoolExecutor(16) as threads:
        together = list(threads.map(complete, prompts))
    assert together == alone and len(set(alone)) > 8


# --- embeddings -----------------------------------------------------------------------------------


def test_embeddings_are_embeds_vectors(client: OpenAI, server: BackgroundServer) -> None:
    texts = ["The cat reads the book.", "A dog likes a value.", "the"]
    plm_answer = httpx.post(f"{server.url}/embed", json={"model": "bert", "texts": texts},
                            headers={"Authorization": f"Bearer {KEY}"}).json()
    as_base64 = client.embeddings.create(model="bert", input=texts)  # the client asks for base64 by default
    as_floats = client.embeddings.create(model="bert", input=texts, encoding_format="float")
    assert [e.embedding for e in as_floats.data] == plm_answer["vectors"]
    torch.testing.assert_close(torch.tensor([e.embedding for e in as_base64.data]), torch.tensor(plm_answer["vectors"]))
    assert [(e.index, e.object) for e in as_floats.data] == [(0, "embedding"), (1, "embedding"), (2, "embedding")]
    assert as_floats.model == "bert" and as_floats.usage.prompt_tokens == as_floats.usage.total_tokens > 3
    one = client.embeddings.create(model="bert", input=texts[0], encoding_format="float")
    assert [e.embedding for e in one.data] == plm_answer["vectors"][:1]


# --- the key --------------------------------------------------------------------------------------


def test_a_wrong_key_is_an_authentication_error(server: BackgroundServer) -> None:
    for wrong in ("sk-test-0123456780", "sk-test", KEY + "0"):
        with pytest.raises(openai.AuthenticationError) as refused:
            OpenAI(base_url=f"{server.url}/v1", api_key=wrong, max_retries=0).models.list()
        assert refused.value.code == "invalid_api_key"


def test_without_the_key_every_endpoint_but_health_and_the_page_is_a_401(server: BackgroundServer) -> None:
    with httpx.Client(base_url=server.url) as http:
        for path in ("/v1/models", "/v1/nowhere"):
            refused = http.get(path)
            assert refused.status_code == 401 and refused.headers["www-authenticate"] == "Bearer"
            error = refused.json()["error"]
            assert error == {"message": error["message"], "type": "invalid_request_error", "param": None,
                             "code": "invalid_api_key"}
        for path, body in (("/v1/completions", {"prompt": "x"}), ("/generate", {"prompt": "x"})):
            assert http.post(path, json=body).status_code == 401
        plm_own = http.get("/models", headers={"Authorization": "Basic " + KEY})
        assert plm_own.status_code == 401 and set(plm_own.json()) == {"error"}
        assert http.get("/models", headers={"Authorization": "bearer " + KEY}).status_code == 200
        assert http.get("/health").json()["status"] == "ok"
        for page in ("/", "/static/app.js", "/static/style.css"):
            assert http.get(page).status_code == 200


def test_plm_serve_takes_the_key_from_api_key_or_plm_api_key(model_dirs: Path, monkeypatch: pytest.MonkeyPatch,
                                                            capsys: pytest.CaptureFixture) -> None:
    served = []
    monkeypatch.setattr(plm.serve.server, "serve", lambda app, sock: (served.append(app), sock.close()))
    model = ["serve", "--model", str(model_dirs / "gpt"), "--port", "0"]
    monkeypatch.setenv("PLM_API_KEY", "from-env")
    assert main([*model, "--api-key", "from-flag"]) == main(model) == 0
    monkeypatch.delenv("PLM_API_KEY")
    assert main([*model, "--host", "0.0.0.0"]) == 0
    assert "without --api-key" in capsys.readouterr().out
    for app, key in zip(served, ("from-flag", "from-env")):
        with TestClient(app) as http:
            assert http.get("/v1/models").status_code == 401
            assert http.get("/v1/models", headers={"Authorization": f"Bearer {key}"}).status_code == 200
    with pytest.raises(SystemExit, match="2"):
        main([*model, "--api-key", ""])
    assert "--api-key: must not be empty" in capsys.readouterr().err


# --- refusals, in OpenAI's error body -------------------------------------------------------------

OUT_OF_RANGE = {
    "temperature below 0": ({"temperature": -0.5}, "temperature"),
    "temperature above 2": ({"temperature": 2.5}, "temperature"),
    "max_tokens 0": ({"max_tokens": 0}, "max_tokens"),
    "max_tokens past the context": ({"max_tokens": 64}, "max_tokens"),
    "n 0": ({"n": 0}, "n"),
    "logprobs 6": ({"logprobs": 6}, "logprobs"),
    "top_p above 1": ({"top_p": 1.5}, "top_p"),
    "five stop strings": ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
    "a penalty": ({"presence_penalty": 0.5}, "presence_penalty"),
    "top_p 0": ({"top_p": 0}, "top_p"),
    "a seed past 64 bits": ({"seed": 2**63}, "seed"),
    "a token id outside the vocabulary": ({"prompt": [1, 2, 300]}, "prompt"),
    "an empty list of token ids": ({"prompt": [[1, 2], []]}, "prompt"),
}


@pytest.mark.parametrize("fields, param", OUT_OF_RANGE.values(), ids=OUT_OF_RANGE.keys())
def test_a_value_out_of_range_is_a_bad_request_naming_the_field(fields: dict, param: str, client: OpenAI) -> None:
    body = {"model": "gpt", "prompt": "The cat", "max_tokens": 4, **fields}
    with pytest.raises(openai.BadRequestError) as refused:
        client.completions.create(**body)
    error = refused.value.body
    assert refused.value.status_code == 400 and error["type"] == "invalid_request_error" and error["param"] == param
    assert param in error["message"] and "\n" not in error["message"]


def test_an_unknown_model_or_a_field_openai_does_not_have_are_refused(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        client.completions.create(model="davinci-002", prompt="The cat")
    assert unknown.value.code == "model_not_found" and "'davinci-002' does not exist" in unknown.value.message
    with pytest.raises(openai.BadRequestError, match="has no field 'top_k'"):
        client.completions.create(model="gpt", prompt="The cat", extra_body={"top_k": 5})
    with pytest.raises(openai.BadRequestError, match="cannot serve /embed"):
        client.embeddings.create(model="gpt", input="The cat")
    with pytest.raises(openai.BadRequestError, match="encoding_format"):
        client.embeddings.create(model="bert", input="The cat", encoding_format="int8")  # type: ignore[arg-type]


def test_chat_is_a_404_for_plms_models_have_no_chat_template(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError, match="no chat template") as refused:
        client.chat.completions.create(model="gpt", messages=[{"role": "user", "content": "Hello"}])
    assert refused.value.body["param"] == "model"


def test_a_failing_generation_is_an_error_event_in_the_stream(client: OpenAI, services: dict,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(services["gpt"].model, "decode_step", lambda *_: 1 / 0)
    with pytest.raises(openai.APIError, match="ZeroDivisionError"):
        list(client.completions.create(model="gpt", prompt="The cat", stream=True))
    with pytest.raises(openai.InternalServerError, match="ZeroDivisionError"):
        client.completions.create(model="gpt", prompt="The cat")
    monkeypatch.undo()
    assert client.completions.create(model="gpt", prompt="The cat", max_tokens=2).choices[0].text is not None


def test_the_answers_field_names_are_openais(server: BackgroundServer) -> None:
    """The client reads missing fields as None; the raw JSON has OpenAI's names, no more and no fewer."""
    headers = {"Authorization": f"Bearer {KEY}"}
    body = {"model": "gpt", "prompt": "The cat", "max_tokens": 3, "temperature": 0, "logprobs": 2}
    answer = httpx.post(f"{server.url}/v1/completions", json=body, headers=headers).json()
    assert set(answer) == {"id", "object", "created", "model", "choices", "usage"}
    assert set(answer["choices"][0]) == {"text", "index", "logprobs", "finish_reason"}
    assert set(answer["choices"][0]["logprobs"]) == {"tokens", "token_logprobs", "top_logprobs", "text_offset"}
    assert set(answer["usage"]) == {"prompt_tokens", "completion_tokens", "total_tokens"}
    embedding = httpx.post(f"{server.url}/v1/embeddings", json={"model": "bert", "input": "x"}, headers=headers).json()
    assert set(embedding) == {"object", "data", "model", "usage"} and set(embedding["data"][0]) == {
        "object", "embedding", "index"}
    chunk = httpx.post(f"{server.url}/v1/completions", json={**body, "stream": True}, headers=headers).text
    assert set(json.loads(chunk.split("\n\n")[0].removeprefix("data: "))) == set(answer) - {"usage"}


def test_a_prompt_past_the_context_is_context_length_exceeded_naming_the_prompt(client: OpenAI) -> None:
    for prompt in ("The cat reads the book. " * 40, [1] * 65, [1] * 64):  # the last fills the context of 64
        with pytest.raises(openai.BadRequestError) as refused:
            client.completions.create(model="gpt", prompt=prompt)
        assert (refused.value.code, refused.value.param) == ("context_length_exceeded", "prompt")
    whole = client.completions.create(model="gpt", prompt=[1] * 64, echo=True, max_tokens=0, logprobs=0)
    assert len(whole.choices[0].logprobs.tokens) == 64  # echoed: it needs no room for new tokens


def test_embeddings_of_an_empty_text_are_refused(client: OpenAI) -> None:
    for texts in ("", ["A man plays a guitar.", ""]):
        with pytest.raises(openai.BadRequestError, match="empty") as refused:
            client.embeddings.create(model="bert", input=texts)
        assert refused.value.param == "input"


# --- what lm-evaluation-harness sends: echo, max_tokens 0, token ids (tests/serve/test_lm_eval.py runs it) -----


def test_echo_gives_the_prompts_tokens_and_the_models_log_probabilities_the_first_none(client: OpenAI,
                                                                                      services: dict) -> None:
    prompt = "a dog likes the"
    gpt = services["gpt"]
    ids = gpt.tokenizer.encode(prompt)
    answer = client.completions.create(model="gpt", prompt=prompt, echo=True, max_tokens=0, logprobs=2)
    [choice] = answer.choices
    logprobs = choice.logprobs
    assert (choice.text, "".join(logprobs.tokens), len(logprobs.tokens)) == (prompt, prompt, len(ids))
    assert (choice.finish_reason, answer.usage.prompt_tokens, answer.usage.completion_tokens) == ("length", len(ids), 0)
    with torch.no_grad():
        expected = gpt.model(torch.tensor([ids])).logits[0, :-1].log_softmax(-1)  # (time - 1, vocab): each next token
    assert logprobs.token_logprobs[0] is None and logprobs.top_logprobs[0] is None  # nothing predicts the first
    chosen = expected.gather(1, torch.tensor(ids[1:])[:, None]).squeeze(1)
    assert logprobs.token_logprobs[1:] == pytest.approx(chosen.tolist(), abs=1e-5)
    for top, scores in zip(logprobs.top_logprobs[1:], expected):
        best = scores.topk(2)
        texts = [gpt.tokenizer.decode([token]) for token in best.indices.tolist()]
        assert top == pytest.approx(dict(zip(texts, best.values.tolist())), abs=1e-5)
    assert logprobs.text_offset == [len("".join(logprobs.tokens[:i])) for i in range(len(ids))]

    body = {"model": "gpt", "prompt": prompt, "max_tokens": 5, "temperature": 0, "logprobs": 1}
    plain = client.completions.create(**body).choices[0]
    echoed = client.completions.create(**body, echo=True).choices[0]  # the prompt's tokens, then the completion's
    assert echoed.text == prompt + plain.text
    assert echoed.logprobs.tokens == logprobs.tokens + plain.logprobs.tokens
    assert echoed.logprobs.token_logprobs[len(ids):] == pytest.approx(plain.logprobs.token_logprobs, abs=1e-5)
    assert echoed.logprobs.text_offset[len(ids):] == plain.logprobs.text_offset
    chunks = [chunk.choices[0] for chunk in client.completions.create(**body, echo=True, stream=True)]
    assert chunks[0].text == prompt and "".join(chunk.text for chunk in chunks) == echoed.text


def test_a_prompt_of_token_ids_is_completed_as_its_text_is(client: OpenAI, services: dict) -> None:
    texts = ["The cat", "a dog likes the"]
    ids = [services["gpt"].tokenizer.encode(text) for text in texts]
    body = {"model": "gpt", "max_tokens": 6, "temperature": 0, "logprobs": 1}
    by_text = client.completions.create(prompt=texts, **body)
    by_ids = client.completions.create(prompt=ids, **body)  # a list of lists of token ids
    assert [(c.text, c.logprobs.text_offset) for c in by_ids.choices] == [
        (c.text, c.logprobs.text_offset) for c in by_text.choices]
    assert by_ids.usage == by_text.usage
    assert client.completions.create(prompt=ids[1], **body).choices[0].text == by_text.choices[1].text  # one list
    with pytest.raises(openai.BadRequestError, match="token ids"):  # /embeddings reads text only, and says so
        client.embeddings.create(model="bert", input=ids[0])


def test_n_choices_of_a_list_of_prompts_come_prompt_by_prompt_and_count_each_prompt_once(client: OpenAI,
                                                                                          services: dict) -> None:
    """OpenAI's order for ``n`` choices of several prompts: prompt 0's n choices, then prompt 1's; and ``usage``
    counts a prompt's tokens once, however many choices continue it. Guards against choices interleaved across the
    prompts, and against prompt tokens counted once per choice. The oracle: each prompt alone, greedy, and the
    tokenizer's count of its tokens."""
    prompts = ["The cat", "a dog likes the"]
    alone = [client.completions.create(model="gpt", prompt=prompt, max_tokens=8, temperature=0).choices[0].text
             for prompt in prompts]
    assert alone[0] != alone[1]  # the premise: the order shows
    answer = client.completions.create(model="gpt", prompt=prompts, max_tokens=8, temperature=0, n=3)
    assert [(c.index, c.text) for c in answer.choices] == list(enumerate([alone[0]] * 3 + [alone[1]] * 3))
    tokenizer = services["gpt"].tokenizer
    assert answer.usage.prompt_tokens == sum(len(tokenizer.encode(prompt)) for prompt in prompts)


def test_a_choice_the_model_ends_with_end_of_text_finishes_with_stop(services: dict) -> None:
    """finish_reason is "stop" where the model wrote end of text (no stop string asked), "length" where it ran out of
    ``max_tokens``, as OpenAI's. Guards against "length" for a choice that ended by itself. (The tiny random model
    gives end of text a probability below 0.4% after any token, too rare to meet in a served completion.)"""
    from plm.serve.openai_api import finish_reason

    gpt = services["gpt"]
    job = gpt.job(gpt.tokenizer.encode("The cat"), 4, temperature=1.0, top_k=0, top_p=1.0, sample=False, seed=None)
    eos, other = gpt.tokenizer.eos_id, gpt.tokenizer.encode(" cat")[0]
    assert finish_reason(job, [{"id": other}, {"id": eos}], stopped=False) == "stop"
    assert finish_reason(job, [{"id": other}] * 4, stopped=False) == "length"
    assert finish_reason(job, [{"id": other}] * 2, stopped=True) == "stop"
