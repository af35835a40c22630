"""Models by Hub id, downloaded: tiny random models made by transformers, served by a stand-in Hub on loopback.

plm asks the stand-in (``HF_ENDPOINT``) through huggingface_hub, as it would ask the Hub, and the model it
builds from the download gives the logits of the transformers model that was published.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import huggingface_hub
import pytest
import torch
import transformers
from safetensors.torch import load_file

import plm
from plm.cli.main import main
from plm.errors import PLMWarning
from plm.serve import BackgroundServer
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import synthetic_text
from tests.hf.test_hf_marian import hf_marian
from tests.storage.hub_stand_in import StandInHub
from tests.tokenization.test_released_tokenizers import write_marian_tokenizer

GPT = "tiny-org/tiny-gpt2"
OPUS = "tiny-org/opus-mt-tiny"
ELMO = "tiny-org/tiny-elmo"
BERT = "tiny-org/tiny-bert"
BERT_SST = "tiny-org/tiny-bert-sst2"
LABELS = {0: "negative", 1: "positive"}


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Tokenizer]:
    texts = synthetic_text(paragraphs=40).splitlines()
    return {"bpe": Tokenizer.train_bpe(texts, vocab_size=300),
            "wordpiece": Tokenizer.train_wordpiece(texts, vocab_size=300, min_frequency=1)}


def gpt_folder(folder: Path, tokenizer: Tokenizer, seed: int) -> tuple[Path, transformers.PreTrainedModel]:
    """A random GPT-2 made by transformers, saved with its tokenizer as a repository holds it."""
    torch.manual_seed(seed)
    config = transformers.GPT2Config(vocab_size=len(tokenizer), n_positions=64, n_embd=32, n_layer=2, n_head=2)
    model = transformers.GPT2LMHeadModel(config).eval()
    model.save_pretrained(folder)
    tokenizer.save(folder)
    return folder, model


def bert_folder(folder: Path, tokenizer: Tokenizer, architecture: type = transformers.BertForSequenceClassification
                ) -> tuple[Path, transformers.PreTrainedModel]:
    """A random BERT (by default a classifier with label names), and its tokenizer."""
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                                     id2label=LABELS, label2id={v: k for k, v in LABELS.items()})
    model = architecture(config).eval()
    model.save_pretrained(folder)
    tokenizer.save(folder)
    return folder, model


@pytest.fixture
def hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[StandInHub]:
    """An empty stand-in Hub that plm downloads from, into a cache of this test's own."""
    stand_in = StandInHub()
    with BackgroundServer(stand_in.app()) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.url)
        monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
        monkeypatch.chdir(tmp_path)  # no local directory of the ids' spelling
        yield stand_in


def same_logits(model: plm.PretrainedModel, reference: transformers.PreTrainedModel) -> None:
    ids = torch.tensor([[5, 9, 2, 7, 11, 3]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=1e-5, atol=1e-5)


def test_a_model_downloads_by_id_and_then_opens_offline_from_the_cache(hub, tmp_path, tokenizers,
                                                                      monkeypatch) -> None:
    folder, reference = gpt_folder(tmp_path / "published", tokenizers["bpe"], seed=0)
    (folder / "tf_model.h5").write_bytes(b"another framework's weights")  # plm never fetches these
    hub.publish(GPT, folder)
    model, tokenizer = plm.load_pretrained(GPT)
    same_logits(model, reference)
    assert len(tokenizer) == len(tokenizers["bpe"])
    fetched = {fetch.filename for fetch in hub.fetches}
    assert "model.safetensors" in fetched and "tf_model.h5" not in fetched
    assert f"GET /api/models/{GPT}/revision/main" in hub.requests  # the log holds the API calls too

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    asked = len(hub.requests)
    same_logits(plm.load(GPT), reference)
    assert hub.requests[asked:] == []  # the cache alone: no API call, no HEAD, no download


def test_offline_the_hub_is_not_asked_even_for_a_model_it_has(hub, tmp_path, tokenizers, monkeypatch) -> None:
    folder, _ = gpt_folder(tmp_path / "published", tokenizers["bpe"], seed=0)
    hub.publish(GPT, folder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(plm.PLMError, match=f"^{GPT}: no such local directory, not in the Hugging Face cache, and "
                                           "HF_HUB_OFFLINE=1 is set$"):
        plm.load(GPT)
    assert hub.requests == []


def test_a_revision_pins_a_branch_or_a_commit(hub, tmp_path, tokenizers) -> None:
    old, old_model = gpt_folder(tmp_path / "v1", tokenizers["bpe"], seed=1)
    new, new_model = gpt_folder(tmp_path / "v2", tokenizers["bpe"], seed=2)
    commit = hub.publish(GPT, old, branch="v1")
    hub.publish(GPT, new, branch="main")
    same_logits(plm.load(GPT), new_model)
    same_logits(plm.load(GPT, revision="v1"), old_model)
    same_logits(plm.load(GPT, revision=commit), old_model)
    with pytest.raises(plm.PLMError, match=f"^{GPT}: the Hugging Face Hub repository has no revision 'v3'$"):
        plm.load(GPT, revision="v3")


def test_an_unknown_id_and_a_repository_without_a_model_are_one_line(hub, tmp_path, tokenizers, capsys) -> None:
    assert main(["generate", "--model", "nobody/nothing", "hello", "--device", "cpu"]) == 2
    assert capsys.readouterr().err == ("plm generate: error: nobody/nothing: no such local directory, and no such "
                                       "model on the Hugging Face Hub (or it is private or gated)\n")
    folder, _ = gpt_folder(tmp_path / "published", tokenizers["bpe"], seed=0)
    (folder / "model.safetensors").unlink()
    hub.publish(GPT, folder)
    with pytest.raises(plm.PLMError, match=f"^{GPT}: the Hugging Face Hub repository has no weights plm reads"):
        plm.load(GPT)


def test_an_interrupted_download_resumes_where_it_stopped(hub, tmp_path, tokenizers, monkeypatch) -> None:
    # huggingface_hub keeps what it received in whole chunks of 10 MB; small ones keep most of the tiny file's half.
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 1024)
    folder, reference = gpt_folder(tmp_path / "published", tokenizers["bpe"], seed=0)
    hub.publish(GPT, folder)
    hub.cut_once.add("model.safetensors")
    same_logits(plm.load(GPT), reference)
    first, second = [fetch.range for fetch in hub.fetches if fetch.filename == "model.safetensors"]
    half = (folder / "model.safetensors").stat().st_size // 2
    assert first is None and second is not None
    assert half - 1024 <= int(second.removeprefix("bytes=").removesuffix("-")) <= half  # the rest only


def test_a_repository_with_only_a_pytorch_bin_is_read_weights_only_and_said_so(hub, tmp_path, tokenizers) -> None:
    folder, reference = gpt_folder(tmp_path / "published", tokenizers["bpe"], seed=0)
    torch.save(load_file(folder / "model.safetensors"), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    hub.publish(GPT, folder)
    with pytest.warns(PLMWarning, match="no safetensors weights; reading its pytorch_model.bin"):
        model = plm.load(GPT)
    same_logits(model, reference)


def test_a_task_model_on_the_hub_opens_with_its_head_and_label_names(hub, tmp_path, tokenizers) -> None:
    folder, reference = bert_folder(tmp_path / "published", tokenizers["wordpiece"])
    hub.publish(BERT_SST, folder)
    model, task = plm.tasks.fine_tuned.load_task_model(BERT_SST)
    assert model.config.head.label_names == ("negative", "positive")
    ids = torch.tensor([[2, 9, 14, 7, 3]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def models_on_a_hub(tmp_path_factory: pytest.TempPathFactory, tokenizers) -> Iterator[tuple[str, Path]]:
    """A stand-in Hub with a GPT-2, two BERTs and an opus-mt, all tiny, and a folder of inputs for the commands."""
    folder = tmp_path_factory.mktemp("published")
    stand_in = StandInHub()
    stand_in.publish(GPT, gpt_folder(folder / "gpt", tokenizers["bpe"], seed=0)[0])
    stand_in.publish(BERT_SST, bert_folder(folder / "bert-sst", tokenizers["wordpiece"])[0])
    stand_in.publish(BERT, bert_folder(folder / "bert", tokenizers["wordpiece"], transformers.BertForMaskedLM)[0])
    opus = folder / "opus"
    opus.mkdir()
    torch.manual_seed(0)
    sentences = synthetic_text(paragraphs=30).splitlines()  # no shared data needed
    hf_marian(vocab_size=write_marian_tokenizer(opus, vocab_size=40, texts=(sentences, sentences))).save_pretrained(
        opus)
    stand_in.publish(OPUS, opus)
    plm.save(plm.from_preset("elmo-micro", softmax=False), folder / "elmo")  # plm's own format, on the Hub
    stand_in.publish(ELMO, folder / "elmo")
    inputs = folder / "inputs"
    inputs.mkdir()
    (inputs / "text.txt").write_text(synthetic_text(paragraphs=4), encoding="utf-8")
    (inputs / "de.txt").write_text("Ein Mann fährt Fahrrad.\nEine Frau liest.\n", encoding="utf-8")
    (inputs / "en.txt").write_text("A man rides a bike.\nA woman reads.\n", encoding="utf-8")
    (inputs / "sst.jsonl").write_text("".join(json.dumps({"text": text, "label": label}) + "\n" for text, label in
                                              [("the cat sat", "positive"), ("a dog ran", "negative")] * 4))
    with BackgroundServer(stand_in.app()) as server:
        yield server.url, inputs


@pytest.fixture
def published(models_on_a_hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The module's stand-in Hub as HF_ENDPOINT, a cache of this test's own; the folder of inputs."""
    url, inputs = models_on_a_hub
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.chdir(tmp_path)
    outputs = tmp_path / "outputs"
    outputs.mkdir()
    return inputs


COMMANDS = {
    "generate": ["generate", "--model", GPT, "the", "--max-new-tokens", "3"],
    "eval perplexity": ["eval", "perplexity", "--model", GPT, "{inputs}/text.txt", "--no-progress"],
    "embed": ["embed", "--model", BERT, "the cat"],
    "fill-mask": ["fill-mask", "--model", BERT, "the [MASK] sat"],
    "predict": ["predict", "--model", BERT_SST, "{inputs}/sst.jsonl"],
    "eval task": ["eval", "task", "--model", BERT_SST, "{inputs}/sst.jsonl"],
    "attention": ["attention", "--model", GPT, "the cat sat", "--out", "outputs/attention.png"],
    "quantize": ["quantize", "--model", GPT, "--out", "outputs/int8"],
    "convert": ["convert", "--model", GPT, "--out", "outputs/plm"],
    "translate": ["translate", "--model", OPUS, "{inputs}/de.txt", "--max-len-b", "4"],
    "seq2seq train": ["seq2seq", "train", "--model", OPUS, "--src", "{inputs}/de.txt", "--tgt", "{inputs}/en.txt",
                      "--validation-src", "{inputs}/de.txt", "--validation-tgt", "{inputs}/en.txt", "--steps", "1",
                      "--metric-examples", "0", "--out", "outputs/opus", "--no-progress"],
    "elmo embed": ["elmo", "embed", "--model", ELMO, "{inputs}/de.txt", "--out", "outputs/vectors.npy",
                   "--no-progress"],
    "eval bleu": ["eval", "bleu", "--model", OPUS, "--src", "{inputs}/de.txt", "--ref", "{inputs}/en.txt",
                  "--max-len-b", "4", "--no-progress"],
    "finetune": ["finetune", "--task", "classify", "--model", BERT_SST, "--train", "{inputs}/sst.jsonl",
                 "--validation", "{inputs}/sst.jsonl", "--epochs", "1", "--out", "outputs/run", "--no-progress"],
}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_that_takes_a_model_takes_a_hub_id(published, command, capsys) -> None:
    args = [arg.format(inputs=published) for arg in COMMANDS[command]]
    assert main([*args, "--device", "cpu"] if command not in {"quantize", "convert"} else args) == 0, \
        capsys.readouterr().err


def test_revision_on_the_command_line(hub, tmp_path, tokenizers, capsys) -> None:
    hub.publish(GPT, gpt_folder(tmp_path / "v1", tokenizers["bpe"], seed=1)[0], branch="v1")
    assert main(["generate", "--model", GPT, "--revision", "v1", "the", "--max-new-tokens", "2",
                 "--device", "cpu"]) == 0
    assert main(["generate", "--model", GPT, "--revision", "v3", "the", "--device", "cpu"]) == 2
    assert capsys.readouterr().err.endswith(f"error: {GPT}: the Hugging Face Hub repository has no revision 'v3'\n")
    assert main(["generate", "--model", str(tmp_path / "v1"), "--revision", "v1", "the", "--device", "cpu"]) == 2
    assert capsys.readouterr().err.endswith("a local directory has no revisions; --revision is for Hub ids\n")


def test_a_name_that_is_both_a_preset_and_a_hub_id_says_which_it_took(hub, tmp_path, capsys) -> None:
    # pretrain builds the preset (and says so before it reads its data, here missing); a command that loads a model
    # asks the Hub, and names the preset when the Hub has no such model
    assert main(["pretrain", "--model", "gpt2", "--train", "missing.txt", "--out", str(tmp_path / "run")]) == 2
    assert ("--model gpt2: plm's preset of that name, a new untrained model; the released weights are the Hugging "
            "Face Hub's openai-community/gpt2") in capsys.readouterr().err
    assert main(["generate", "--model", "gpt2-mini", "the", "--device", "cpu"]) == 2
    assert capsys.readouterr().err.endswith("no such model on the Hugging Face Hub (or it is private or gated); "
                                            "gpt2-mini is a preset of plm pretrain (a new, untrained model), not a "
                                            "model to load\n")


def test_plm_serve_loads_a_hub_id(published) -> None:
    from plm.serve import load_service

    service = load_service(GPT, "gpt", torch.device("cpu"))
    assert service.kind == "causal LM" and "generate" in service.capabilities
