"""lm-evaluation-harness scores a model through plm serve (its ``local-completions`` backend) as plm scores it.

lm-eval is the client here, never a dependency of plm: it tokenizes on its side, sends token ids with ``echo`` and
``logprobs`` for its log-likelihood tasks, and token ids to continue for its generation tasks. The tasks are YAML
files beside this test (``lm_eval_tasks/``) that read LAMBADA from shared/, or a generated stand-in where shared/
lacks it.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import lm_eval
import pytest
import torch
import torch.nn.functional as F

import plm
from plm.apps.text_pipelines import left_pad
from plm.apps.zeroshot.evaluation import ZeroShotOptions
from plm.apps.zeroshot.lambada import evaluate_lambada, split_last_word
from plm.apps.zeroshot.scoring import score_continuations
from plm.decoding import generate
from plm.models import from_preset
from plm.serve import BackgroundServer, create_app, load_service
from plm.tokenization.tokenizer import Tokenizer
from tests.conftest import synthetic_sentence, synthetic_text

TASKS = Path(__file__).with_name("lm_eval_tasks")
LAMBADA = Path("../shared/data/lambada/lambada_test.jsonl")  # as the tasks read it, from the repository's root
ROOT = Path(__file__).resolve().parents[2]
PASSAGES = 6  # the slice: lm-eval's limit, the first passages of the file
LEARNED = 3  # the model is trained on the first few, so that it gets those right and the others wrong
CONTEXT = 256
STOPS = (".", "\n")  # plm_lambada_greedy's


@pytest.fixture(scope="module")
def lambada_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where lm-eval runs, so that the tasks' ``../shared/data/lambada`` is LAMBADA: the repository's root, or a
    stand-in root beside a generated file of passages of the tests' grammar where shared/ lacks LAMBADA."""
    if (ROOT / LAMBADA).is_file():
        return ROOT
    root = tmp_path_factory.mktemp("lambada") / "main"
    root.mkdir()
    (root / LAMBADA).parent.mkdir(parents=True)
    rng = random.Random(0)
    passages = [" ".join(f"{synthetic_sentence(rng)}." for _ in range(4)) + " " + synthetic_sentence(rng)
                for _ in range(PASSAGES)]
    (root / LAMBADA).write_text("".join(json.dumps({"text": text}) + "\n" for text in passages), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def passages(lambada_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The slice lm-eval reads (its first PASSAGES passages), as a file of its own for plm eval lambada."""
    lines = (lambada_root / LAMBADA).read_text(encoding="utf-8").splitlines()[:PASSAGES]
    path = tmp_path_factory.mktemp("slice") / "lambada.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def model_dir(passages: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A gpt2-micro of context 256 trained for a few steps on the slice's first LEARNED passages, saved."""
    texts = [json.loads(line)["text"] for line in passages.read_text(encoding="utf-8").splitlines()]
    torch.manual_seed(0)
    bpe = Tokenizer.train_bpe([synthetic_text(50), *texts], 600)
    gpt = from_preset("gpt2-micro", vocab_size=len(bpe), context_length=CONTEXT)
    ids, mask = left_pad([bpe.encode(text) for text in texts[:LEARNED]], bpe.padding_id)  # (LEARNED, longest)
    optimizer = torch.optim.AdamW(gpt.parameters(), lr=2e-2)
    for _ in range(30):
        logits = gpt(ids, mask).logits[:, :-1]  # (LEARNED, longest - 1, vocab)
        loss = F.cross_entropy(logits.transpose(1, 2), ids[:, 1:], reduction="none")
        loss = (loss * mask[:, 1:]).sum() / mask[:, 1:].sum()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    path = tmp_path_factory.mktemp("lm-eval") / "gpt"
    plm.save(gpt.eval(), path, bpe)
    return path


@pytest.fixture(scope="module")
def evaluated(model_dir: Path, lambada_root: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """lm-eval's results of both tasks through a live plm serve on loopback, with each document's answers."""
    import datasets
    from lm_eval.tasks import TaskManager

    with pytest.MonkeyPatch.context() as patch, BackgroundServer(
        create_app([load_service(model_dir, "gpt", "cpu")])
    ) as server:
        patch.chdir(lambada_root)
        patch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.mktemp("datasets"))
        model_args = {"model": "gpt", "base_url": f"{server.url}/v1/completions", "tokenizer": str(model_dir),
                      "tokenizer_backend": "huggingface", "max_length": CONTEXT, "num_concurrent": 4}
        tasks = TaskManager(include_path=str(TASKS), include_defaults=False)  # lm-eval's own: 25 s to index
        return lm_eval.simple_evaluate(
            model="local-completions", model_args=model_args, tasks=["plm_lambada", "plm_lambada_greedy"],
            task_manager=tasks, limit=PASSAGES, bootstrap_iters=0, log_samples=True,
        )


def by_passage(evaluated: dict, task: str) -> dict[str, Any]:
    """Each passage's answer from lm-eval (before its filters), by its text."""
    return {sample["doc"]["text"]: sample["resps"][0][0] for sample in evaluated["samples"][task]}


def test_lm_eval_scores_lambada_through_plm_serve_as_plm_eval_lambada_does(evaluated: dict, model_dir: Path,
                                                                            passages: Path) -> None:
    model, tokenizer = plm.load_pretrained(model_dir)
    texts = [json.loads(line)["text"] for line in passages.read_text(encoding="utf-8").splitlines()]
    pairs = [split_last_word(text) for text in texts]
    assert [(context, target) for context, target in pairs] == [
        (" ".join(text.split(" ")[:-1]), " " + text.split(" ")[-1]) for text in texts]  # lm-eval's split is plm's
    expected = score_continuations(model, tokenizer, pairs)  # what plm eval lambada scores
    answers = by_passage(evaluated, "plm_lambada")
    assert len(answers) == PASSAGES
    for text, scored in zip(texts, expected):
        logprob, greedy = answers[text]
        assert logprob == pytest.approx(scored.logprob, abs=1e-4) and greedy == scored.greedy
    plm_eval = evaluate_lambada(ZeroShotOptions(model, tokenizer), passages)
    results = evaluated["results"]["plm_lambada"]
    assert results["acc,none"] == plm_eval.accuracy and 0 < plm_eval.accuracy < 1  # some right, some wrong
    assert results["perplexity,none"] == pytest.approx(plm_eval.word_perplexity, rel=1e-4)


def test_lm_eval_generates_through_plm_serve_what_plm_generates(evaluated: dict, model_dir: Path,
                                                                passages: Path) -> None:
    """Greedy continuations of the passages' contexts, up to the task's stop strings; the first word of each is
    scored against the passage's last word."""
    model, tokenizer = plm.load_pretrained(model_dir)
    answers = by_passage(evaluated, "plm_lambada_greedy")
    assert len(answers) == PASSAGES
    right = []
    for text, answer in answers.items():
        context, target = split_last_word(text)
        ids = tokenizer.encode(context)
        tokens = generate(model, torch.tensor([ids]), 8, eos_token_id=tokenizer.eos_id)[0, len(ids):].tolist()
        greedy = re.split("|".join(map(re.escape, STOPS)), tokenizer.decode(tokens, skip_special_tokens=True))[0]
        assert answer == greedy
        right.append(re.findall(r"\w+", greedy)[:1] == [target.strip()])
    exact_match = evaluated["results"]["plm_lambada_greedy"]["exact_match,first_word"]
    assert exact_match == pytest.approx(sum(right) / PASSAGES) and 0 < exact_match < 1



def test_plm_never_imports_lm_eval() -> None:
    """lm-eval is a client of plm serve in the tests, not a dependency of plm."""
    importing = [path.relative_to(ROOT) for path in (ROOT / "src").rglob("*.py")
                 if re.search(r"^\s*(import|from)\s+lm_eval\b", path.read_text(encoding="utf-8"), re.MULTILINE)]
    assert importing == []
