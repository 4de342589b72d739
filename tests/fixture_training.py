"""The trained fixture: the random fixture checkpoint after a short training on protocol episodes.

Random weights never write SQL that runs, so they cannot reach the loop's paths that depend on
what a query does: the fallback to the last query that ran, and the limit on failed
`run_query` calls in a row. This module gives the tests a model that can. Teacher episodes are
written with the runtime's own prompt template and the real tools over Chinook and Northwind:
list the tables, describe the one the question names, run a query (in about half of the
episodes after one or two attempts at a misspelt table that fail), then submit it. The fixture
checkpoint is trained on the assistant turns of those episodes for a few hundred steps (CPU,
a couple of minutes) and written back in the same layout, so the converter turns it into a GGUF
like any other checkpoint.

The result follows the protocol loosely and copies names imperfectly: sampled with different
seeds, some of its queries run, some fail, and some answers break. Which ones is up to the
sampled tokens; nothing in the runtime knows the model was trained.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from edge_sql.agent.prompt import PromptTemplate, load_prompt
from edge_sql.tools import ReadOnlyDatabase, Toolbox
from edge_sql.tools.identifiers import display_identifier

TRAIN_SEED = 20261130
TRAIN_STEPS = 160
LEARNING_RATE = 3e-3
EPISODES_PER_DATABASE = 96
MAX_ROUNDS = 6  # the protocol's budget lines count down from here

Piece = tuple[str, bool]  # (text, trained on it)


@dataclass(frozen=True)
class TeacherQuestion:
    question: str
    table: str
    sql: str


def teacher_questions(db: ReadOnlyDatabase) -> list[TeacherQuestion]:
    """Simple questions that name one table (and a column), with their SQL."""
    questions = []
    for table in db.table_names():
        t = display_identifier(table)
        questions.append(
            TeacherQuestion(f"How many rows does the {table} table have?", table, f"SELECT COUNT(*) FROM {t}")
        )
        for column in db.column_names(table)[:4]:
            c = display_identifier(column)
            questions.append(
                TeacherQuestion(f"Show the {column} of every row of {table}.", table, f"SELECT {c} FROM {t}")
            )
            questions.append(
                TeacherQuestion(f"What is the largest {column} in {table}?", table, f"SELECT MAX({c}) FROM {t}")
            )
    return questions


def misspelt(sql: str, table: str, rng: random.Random) -> str:
    """`sql` with its table name misspelt in one of the ways a small model does."""
    t = display_identifier(table)
    wrong = rng.choice([table + "s", table[:-1], table.lower() + "_table", table + "Info"])
    return sql.replace(t, display_identifier(wrong))


class TeacherWriter:
    """Writes teacher episodes as (text, trained) pieces in the runtime's own transcript format."""

    def __init__(self, prompt: PromptTemplate | None = None) -> None:
        self.prompt = prompt or load_prompt()
        self.chat = self.prompt.chat

    def episode(self, toolbox: Toolbox, item: TeacherQuestion, failed_attempts: int, rng: random.Random) -> list[Piece]:
        chat, prompt = self.chat, self.prompt
        pieces: list[Piece] = [
            (
                chat.open_turn("system")
                + prompt.system_text(max_rounds=MAX_ROUNDS)
                + chat.turn_end
                + chat.turn_separator
                + chat.open_turn("user")
                + prompt.user_text(item.question)
                + chat.turn_end
                + chat.turn_separator
                + chat.open_turn("assistant")
                + chat.assistant_prefix,
                False,
            ),
        ]
        turns = [
            ("First I list the tables.", "list_tables", {}),
            (f"The question is about {item.table}.", "describe_table", {"table_name": item.table}),
        ]
        turns += [
            ("I run the query.", "run_query", {"sql": misspelt(item.sql, item.table, rng)})
            for _ in range(failed_attempts)
        ]
        turns += [
            ("I check the query.", "run_query", {"sql": item.sql}),
            ("The result answers the question.", "submit_sql", {"sql": item.sql}),
        ]
        for index, (think, tool, args) in enumerate(turns):
            call = _call_text(tool, args)
            pieces.append((think + "\n" + chat.think_end + chat.after_think + call + chat.turn_end, True))
            if tool == "submit_sql":
                break
            output = toolbox.call(tool, args).output
            body = (
                prompt.result_text(call, output) + prompt.result_separator + prompt.budget_text(MAX_ROUNDS - index - 1)
            )
            pieces.append(
                (
                    chat.turn_separator
                    + chat.open_turn("user")
                    + body
                    + chat.turn_end
                    + chat.turn_separator
                    + chat.open_turn("assistant")
                    + chat.assistant_prefix,
                    False,
                )
            )
        return pieces


def _call_text(tool: str, args: dict) -> str:
    return json.dumps({"tool": tool, "args": args}, ensure_ascii=False)


def teacher_episodes(
    databases: list[Path], per_database: int = EPISODES_PER_DATABASE, seed: int = TRAIN_SEED
) -> list[list[Piece]]:
    """`per_database` teacher episodes over each database, 0, 1 or 2 failed attempts each."""
    rng = random.Random(seed)
    writer = TeacherWriter()
    episodes = []
    for path in databases:
        with ReadOnlyDatabase(path) as db:
            toolbox = Toolbox(db)
            items = teacher_questions(db)
            for _ in range(per_database):
                episodes.append(writer.episode(toolbox, rng.choice(items), rng.choice((0, 0, 1, 2)), rng))
    return episodes


def encode(tokenizer, pieces: list[Piece]) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids of an episode and a mask of the tokens trained on."""
    ids: list[int] = []
    mask: list[bool] = []
    for text, trained in pieces:
        piece_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids += piece_ids
        mask += [trained] * len(piece_ids)
    return torch.tensor(ids), torch.tensor(mask)


def train_checkpoint(
    source: Path, out_dir: Path, databases: list[Path], *, steps: int = TRAIN_STEPS, log: Callable[[str], None] = print
) -> Path:
    """Train the checkpoint in `source` on teacher episodes; write it to `out_dir` in the same layout."""
    # One thread: the suite's other pytest worker has the other core, and torch's threads
    # spinning against llama.cpp's on 2 cores made training ~3x slower (12 min vs ~4).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _train(source, out_dir, databases, steps=steps, log=log)
    finally:
        torch.set_num_threads(threads)


def _train(source: Path, out_dir: Path, databases: list[Path], *, steps: int, log: Callable[[str], None]) -> Path:
    from safetensors.torch import load_file
    from transformers import AutoTokenizer, Qwen3_5ForConditionalGeneration

    from fixture_checkpoint import write_safetensors

    torch.manual_seed(TRAIN_SEED)
    tokenizer = AutoTokenizer.from_pretrained(source)
    data = [encode(tokenizer, pieces) for pieces in teacher_episodes(databases)]
    model = Qwen3_5ForConditionalGeneration.from_pretrained(source, dtype=torch.float32)
    text_model, lm_head = model.model.language_model, model.lm_head
    text_model.embed_tokens.weight.requires_grad_(False)  # tied to the output: keep the random vocabulary
    params = [p for p in text_model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=LEARNING_RATE, total_steps=steps, pct_start=0.1)
    order = random.Random(TRAIN_SEED)
    model.train()
    for step in range(steps):
        ids, mask = data[order.randrange(len(data))]
        hidden = text_model(input_ids=ids[None, :-1]).last_hidden_state[0]
        targets = mask[1:]
        logits = lm_head(hidden[targets])
        loss = torch.nn.functional.cross_entropy(logits, ids[1:][targets])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        schedule.step()
        if step % 25 == 0 or step == steps - 1:
            log(f"step {step}: loss {loss.item():.3f}")
    trained = {f"model.language_model.{name}": value for name, value in text_model.state_dict().items()}
    tensors = load_file(str(source / "model.safetensors"))
    for name in tensors:
        if name in trained:
            tensors[name] = trained[name].to(torch.bfloat16).contiguous()
    out_dir.mkdir(parents=True, exist_ok=True)
    write_safetensors(tensors, out_dir, shards=1)
    for path in source.iterdir():
        if path.is_file() and not path.name.endswith(".safetensors") and not path.name.startswith("."):
            shutil.copyfile(path, out_dir / path.name)
    return out_dir
