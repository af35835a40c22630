"""Cut the SQuAD sample's chapter-long contexts into SQuAD-sized paragraphs, for a training and a dev file.

../shared/data/squad/dev-v1.1-sample.json holds six textbook chapters, each one context of
60,000-130,000 characters, and answers without ``answer_start``. This script collapses white
space, cuts each context at a space after every ~1,000 characters, keeps each question
with the piece that holds its answer's first occurrence (a piece is stretched to the end
of an answer that crosses its cut), drops the questions whose answer is nowhere in the
context, and writes the odd chapters as training and the even ones as dev data:

    python examples/finetune/squad-sample-paragraphs.py ../shared/data/squad/dev-v1.1-sample.json train.json dev.json
"""

import json
import sys

PIECE = 1000  # characters per paragraph, about SQuAD's

source, train_out, dev_out = sys.argv[1:4]
data = json.load(open(source, encoding="utf-8"))
kept = dropped = 0
articles = []
for article in data["data"]:
    paragraphs = []
    for paragraph in article["paragraphs"]:
        context = " ".join(paragraph["context"].split())
        cuts, start = [], 0
        while start < len(context):
            end = context.find(" ", start + PIECE)
            end = len(context) if end == -1 else end
            cuts.append([start, end, []])
            start = end
        for question in paragraph["qas"]:
            answer = " ".join(question["answers"][0]["text"].split())
            at = context.lower().find(answer.lower())
            if at < 0:
                dropped += 1
                continue
            cut = next(c for c in cuts if c[0] <= at < c[1])
            cut[1] = max(cut[1], at + len(answer))
            cut[2].append(dict(question, answers=[{"text": answer}]))
            kept += 1
        paragraphs += [{"context": context[start:end], "qas": qas} for start, end, qas in cuts if qas]
    articles.append({"title": article["title"], "paragraphs": paragraphs})
json.dump(dict(data, data=articles[0::2]), open(train_out, "w", encoding="utf-8"))
json.dump(dict(data, data=articles[1::2]), open(dev_out, "w", encoding="utf-8"))
print(f"kept {kept} questions, dropped {dropped} whose answer is not in the context")
