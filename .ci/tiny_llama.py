"""Make the real-engine bed's tiny Llama: a config, a 512-token BPE tokenizer, a chat template, and
weights trained for about a minute so greedy decoding answers the probe questions correctly.

Run with the engines environment's Python (``.ci/real-engines`` does); never imported by hypoloop's
agent/ or tools/. Nothing is downloaded: the tokenizer is trained here on the sentences below and the
model is built from a config (transformers ``LlamaConfig``/``LlamaForCausalLM``).

Shape (facts in ../shared/reference/real-engines-cpu.md): hidden 128, 2 heads and 1 KV head (head size
64: vLLM's CPU attention rejects head size 16, SGLang with tensor parallel 2 needs more KV heads), 2
layers, 512 positions. Training: AdamW lr 3e-3, fixed seed, no BOS (the engines tokenize prompts without
one), each text ending with the end-of-turn token so the engines stop after the answer.

The answers the healthy model gives (greedy) are written to ``healthy.json`` beside the weights and
checked here before the model is published: the output folder appears whole (renamed into place) or
not at all, so a watcher polling ``config.json`` never sees a half-made model.

Usage: python tiny_llama.py --out DIR [--steps 400] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

END = "<|end|>"
SPECIAL = ["<|endoftext|>", END, "<|system|>", "<|user|>", "<|assistant|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

#: Plain sentences (the /generate and /v1/completions probes continue "The capital of France is").
SENTENCES = [
    "The capital of France is Paris.",
    "The capital of Germany is Berlin.",
    "The capital of Italy is Rome.",
    "The capital of Spain is Madrid.",
    "The capital of Japan is Tokyo.",
    "Paris is the largest city in France.",
    "The river Seine flows through Paris.",
    "The sky is blue and the grass is green.",
    "One plus one is two, and two plus two is four.",
    "A cat sat on the mat and looked at the dog.",
    "The sun rises in the east and sets in the west.",
    "Water boils at one hundred degrees.",
]
#: Chat turns (user, assistant): the chat probe asks the first question.
CHAT = [
    ("What is the capital of France? Answer in one word.", "Paris"),
    ("What is the capital of France?", "The capital of France is Paris."),
    ("What is the capital of Germany? Answer in one word.", "Berlin"),
    ("What is the capital of Italy? Answer in one word.", "Rome"),
    ("What is the capital of Spain? Answer in one word.", "Madrid"),
    ("What is the capital of Japan? Answer in one word.", "Tokyo"),
    ("What color is the sky? Answer in one word.", "Blue"),
    ("Hello!", "Hello! How can I help you today?"),
]
#: What the healthy model must answer greedily (prompt kind, prompt, expected start of the answer).
CHECKS = [
    ("generate", "The capital of France is", " Paris"),
    ("generate", "The capital of Germany is", " Berlin"),
    ("chat", "What is the capital of France? Answer in one word.", "Paris"),
    ("chat", "What is the capital of France?", "The capital of France is Paris"),
]


def chat_text(user: str, assistant: str | None = None) -> str:
    """The chat template's rendering of one user turn (and the assistant's answer when given)."""
    head = f"<|user|>\n{user}{END}\n<|assistant|>\n"
    return head if assistant is None else head + assistant + END


def make_tokenizer(vocab_size: int) -> PreTrainedTokenizerFast:
    """A byte-level BPE of `vocab_size` tokens trained on the texts above, wrapped for transformers."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = SENTENCES + [chat_text(u, a) for u, a in CHAT]
    tok.train_from_iterator(corpus * 4, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=END,
        pad_token="<|endoftext|>",
        unk_token=None,
        add_bos_token=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.model_max_length = 512
    return fast


def training_texts() -> list[str]:
    """Each training text: a sentence or a rendered chat turn, ending with the end-of-turn token."""
    return [s + END for s in SENTENCES] + [chat_text(u, a) for u, a in CHAT]


def greedy(model: LlamaForCausalLM, tok: PreTrainedTokenizerFast, prompt: str, n: int = 12) -> str:
    """Greedy continuation of `prompt` (no BOS), stopping at the end-of-turn token."""
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(
            ids, max_new_tokens=n, do_sample=False, eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
    return tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    random.seed(args.seed)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    t0 = time.monotonic()

    tok = make_tokenizer(512)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        bos_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(cfg)

    texts = training_texts()
    enc = [tok(t, add_special_tokens=False).input_ids for t in texts]
    width = max(len(e) for e in enc)
    pad = tok.pad_token_id
    ids = torch.full((len(enc), width), pad, dtype=torch.long)
    labels = torch.full((len(enc), width), -100, dtype=torch.long)
    mask = torch.zeros((len(enc), width), dtype=torch.long)
    for i, e in enumerate(enc):
        ids[i, : len(e)] = torch.tensor(e)
        labels[i, : len(e)] = torch.tensor(e)
        mask[i, : len(e)] = 1

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    loss = torch.tensor(0.0)
    for step in range(args.steps):
        out = model(input_ids=ids, attention_mask=mask, labels=labels)
        loss = out.loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}", file=sys.stderr)
    print(f"trained {args.steps} steps in {time.monotonic() - t0:.0f} s, loss {loss.item():.4f}",
          file=sys.stderr)

    model.eval()
    model = model.to(torch.bfloat16)  # what the engines load (config torch_dtype)
    healthy = []
    failed = []
    for kind, prompt, want in CHECKS:
        text = greedy(model, tok, chat_text(prompt) if kind == "chat" else prompt)
        healthy.append({"kind": kind, "prompt": prompt, "answer": text})
        if not text.startswith(want):
            failed.append(f"{kind} {prompt!r}: got {text!r}, expected it to start with {want!r}")
    if failed:
        print("the trained model does not answer as it must:\n  " + "\n  ".join(failed), file=sys.stderr)
        return 1

    tmp = args.out.parent / f".{args.out.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tok.save_pretrained(tmp)
    model.generation_config.save_pretrained(tmp)
    (tmp / "healthy.json").write_text(json.dumps(healthy, indent=1) + "\n")
    (tmp / "README.md").write_text(
        "Tiny Llama made by hypoloop's .ci/tiny_llama.py for the real-engine tests (not a real model).\n"
        f"Trained {args.steps} steps, seed {args.seed}; greedy answers in healthy.json.\n"
    )
    (tmp / ".trained").write_text(f"steps={args.steps} seed={args.seed}\n")
    if args.out.exists():
        shutil.rmtree(args.out)
    tmp.rename(args.out)
    for h in healthy:
        print(f"{h['kind']:8} {h['prompt']!r} -> {h['answer']!r}", file=sys.stderr)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
