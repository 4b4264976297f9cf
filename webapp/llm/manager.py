"""The send pipeline: route, bound, dispatch, fall back.

Every chat, streamed chat and tool call is fitted to the window of the model
about to serve it, and fitted again if a fallback model takes over, so the
window that bounded a send is always the window of the model that answered.
A provider that still refuses the prompt as too long teaches the calibration
and gets one re-fitted retry. A raw completion is never pruned, only reported.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

from webapp.llm.affinity import CacheKeys
from webapp.llm.calibration import Calibrator
from webapp.llm.catalog import Catalog, ModelSpec
from webapp.llm.estimator import REPLY_PRIMING, estimate_texts
from webapp.llm.images import image_tokens
from webapp.llm.providers import build_provider
from webapp.llm.providers.base import (
    CallInfo,
    ChatResult,
    CompletionResult,
    ContextLengthExceeded,
    Message,
    Prefill,
    Provider,
    ProviderError,
    Usage,
)
from webapp.llm.providers.transport import TransportKind
from webapp.llm.routing import Route, resolve
from webapp.llm.tokenizers import Tokenizer, Tokenizers
from webapp.llm.window import (
    FitResult,
    Transcript,
    budget_for,
    fit,
    reserve_of,
    split_turns,
)

log = logging.getLogger(__name__)


COUNT_BATCH = 32
"""Messages counted per tokenizer call when history has to be counted during a send."""
COUNT_AT_MOST = 512
"""Messages counted during one send at most (newest first); later sends count the rest."""
SYSTEM_COUNTS_KEPT = 256
"""System prompts whose counts are kept in memory, per tokenizer."""


def countable_text(message: Message) -> str | None:
    """The text a tokenizer counts for a message, or None when only the estimate can
    size it (tool calls, a `name`, parts other than text and pictures): their wire form
    is the provider's business, and a prompt with a part the tokenizer did not count
    would teach the shared template overhead what one caller put in it. A message with
    pictures counts its text part; its pictures are the provider's rule's
    (`Transcript.pictures`, added per model by `LLMManager.fit_for`)."""
    if message.get("tool_calls") or message.get("role") == "tool" or message.get("name"):
        return None
    content = message.get("content")
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not all(
        isinstance(part, dict) and part.get("type") in ("text", "image_url") for part in content
    ):
        return None
    texts = [str(part.get("text") or "") for part in content if part["type"] == "text"]
    # Several text parts are joined as the provider chooses: only the estimate sizes them.
    return (texts or [""])[0] if len(texts) <= 1 else None


def has_picture_parts(message: Message) -> bool:
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(part, dict) and part.get("type") != "text" for part in content
    )


def carries_pictures(messages: Sequence[Message]) -> bool:
    """Whether a prompt holds a picture (or any part but text): what the provider counts
    for it is its own, so the prompt teaches neither the factor nor the overhead."""
    return any(has_picture_parts(m) for m in messages)


@dataclass(frozen=True, slots=True)
class Fitted:
    fit: FitResult


@dataclass(frozen=True, slots=True)
class Counted:
    """Messages counted during a send (they had no count for this tokenizer yet): the
    caller stores them by row id, so they are never counted again."""

    tokenizer: str
    counts: dict[int, int]


@dataclass(frozen=True, slots=True)
class Delta:
    text: str


@dataclass(frozen=True, slots=True)
class Prefilling:
    """The engine's progress through the prompt, before the answer's first token."""

    progress: Prefill


@dataclass(frozen=True, slots=True)
class Finished:
    model: str
    finish_reason: str | None
    usage: Usage | None


StreamEvent = Counted | Fitted | Prefilling | Delta | Finished


@dataclass(frozen=True, slots=True)
class Plan:
    """A call bounded for the first model of its route, before anything is sent.

    Making the plan is separate from sending it so a caller can store the fit (a
    conversation stores it on the user's turn) before the provider is called; the
    route is resolved once, so the model planned for is the model asked first.
    """

    route: Route
    transcript: Transcript
    fit: FitResult
    caller: str
    """Whose send it is (the owner key): what its answer or refusal teaches is this
    caller's own figure first (`webapp.llm.calibration`)."""
    tools: list[dict[str, Any]] | None = None
    max_tokens: int | None = None
    cache_key: str | None = None
    """The key that keeps the call on its conversation's cache (`webapp.llm.affinity`)."""
    temperature: float | None = None
    """None: the provider's default (a user's preset may set it)."""


class AllModelsFailed(ProviderError):
    """Every model of the route failed with a retryable error; the last one is kept."""

    def __init__(self, errors: list[tuple[str, ProviderError]]) -> None:
        detail = "; ".join(f"{model}: {error.message}" for model, error in errors)
        last = errors[-1][1]
        super().__init__(f"no model could answer ({detail})", status=last.status)
        self.errors = errors
        self.retry_after = getattr(last, "retry_after", None)

    def public(self, model: str) -> str:
        reasons = "; ".join(f"{name} {error.reason}" for name, error in self.errors)
        return f"No model could answer: {reasons}."


@dataclass(frozen=True, slots=True)
class CompletionReport:
    """A completion that was larger than the budget; it was sent anyway, never pruned."""

    model: str
    budget: int
    estimated_tokens: int


class LLMManager:
    def __init__(
        self,
        catalog: Catalog,
        calibrator: Calibrator,
        providers: dict[str, Provider] | None = None,
        tokenizers: Tokenizers | None = None,
        *,
        transport_kind: TransportKind = "asyncio",
        keys: CacheKeys | None = None,
    ) -> None:
        self.catalog = catalog
        self.keys = keys or CacheKeys("")
        """The deployment's cache keys (`Settings.secret_key`); tests may leave it out."""
        self.calibrator = calibrator
        self._providers = dict(providers or {})
        self._transport_kind = transport_kind
        self.tokenizers = tokenizers or Tokenizers()
        """Unprobed (as in tests that do not care), every model is estimated."""
        self._system_counts: dict[tuple[str, str], int] = {}

    def tokenizer_for(self, model: ModelSpec) -> Tokenizer:
        return self.tokenizers.for_model(model)

    def exact_tokenizers(self, route: Route) -> list[str]:
        """The ids of the exact tokenizers a send down `route` may count with."""
        ids = (self.tokenizer_for(model) for model in route.models)
        return list(dict.fromkeys(t.id for t in ids if t.exact))

    def sizers(self, route: Route, caller: str) -> list[tuple[str | None, float, int]]:
        """How each model of the route sizes a message of `caller`'s: (exact tokenizer id
        or None, the estimate's factor, template overhead per counted message). A history
        walk keeps reading while any model could still take more."""
        sizers = []
        for model in route.models:
            tokenizer = self.tokenizer_for(model)
            sizers.append(
                (
                    tokenizer.id if tokenizer.exact else None,
                    self.calibrator.factor(model.name, caller),
                    self.calibrator.overhead(model.name, caller),
                )
            )
        return sizers

    def provider_for(self, model: ModelSpec) -> Provider:
        provider = self._providers.get(model.provider)
        if provider is None:
            provider = build_provider(self.catalog.providers[model.provider], self._transport_kind)
            self._providers[model.provider] = provider
        return provider

    async def aclose(self) -> None:
        for provider in self._providers.values():
            await provider.aclose()

    def route(self, configuration: str) -> Route:
        return resolve(self.catalog, configuration)

    def max_tokens_for(self, route: Route, max_tokens: int | None) -> int | None:
        return max_tokens if max_tokens is not None else route.configuration.max_tokens

    def reserve_for(self, route: Route, model: ModelSpec, max_tokens: int | None) -> int:
        return reserve_of(self.max_tokens_for(route, max_tokens), model)

    def serving(self, model: ModelSpec) -> ModelSpec:
        """The model as its engine runs it: its window is the smaller of the catalog's and
        the one its engine named when it refused a longer prompt."""
        learned = self.calibrator.window(model.name)
        if learned is None or learned >= model.window:
            return model
        return model.model_copy(update={"context_window": learned})

    def largest_budget(self, route: Route, max_tokens: int | None = None) -> int:
        """The most prompt any model of the route could take: how much history is worth loading."""
        return max(
            budget_for(self.serving(model), self.reserve_for(route, model, max_tokens))
            for model in route.models
        )

    def fit_for(
        self,
        route: Route,
        model: ModelSpec,
        transcript: Transcript,
        *,
        caller: str,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
    ) -> FitResult:
        """`transcript` fitted to `model`, sized by `caller`'s figures."""
        tokenizer = self.tokenizer_for(model)
        counts = transcript.counts.get(tokenizer.id) if tokenizer.exact else None
        if counts is not None and all(count is None for count in counts):
            counts = None  # nothing could be counted: the tokenizer is down
        if counts is not None:
            counts = self._with_pictures(model, transcript, counts)
        if not tokenizer.exact:
            counted_by = "estimate"
        elif counts is None:
            counted_by = f"estimate ({tokenizer.id} unavailable)"
        else:
            counted_by = tokenizer.id
        result = fit(
            transcript.messages,
            self.serving(model),
            tools,
            self.reserve_for(route, model, max_tokens),
            estimates=transcript.estimates,
            calibration=self.calibrator.factor(model.name, caller),
            counts=counts,
            overhead=self.calibrator.overhead(model.name, caller),
            pinned=transcript.pinned,
            counted_by=counted_by,
            trim_to=route.configuration.trim_to,
            # The kept cut was sized for the route's first model; another starts afresh.
            keep_from=transcript.keep_from if model is route.primary else 0,
            unread_before=transcript.omitted_turns > 0,
            clear_keep=transcript.clear_keep,
            cleared_through=transcript.cleared_through if model is route.primary else 0,
            summary=transcript.summary.index if transcript.summary else None,
            summary_room=transcript.summary.room if transcript.summary else 0,
        )
        if transcript.omitted_turns:
            result = dataclasses.replace(
                result, dropped_turns=result.dropped_turns + transcript.omitted_turns
            )
        return result

    def picture_tokens(self, model: ModelSpec, sizes: Sequence[tuple[int, int]]) -> int:
        """Pictures of these sizes (width, height as stored) by `model`'s provider rule."""
        provider = self.catalog.providers.get(model.provider)
        kind = provider.kind if provider is not None else "openai"
        return sum(image_tokens(kind, w or 1, h or 1, model.image_tokens) for w, h in sizes)

    def _with_pictures(
        self, model: ModelSpec, transcript: Transcript, counts: Sequence[int | None]
    ) -> list[int | None]:
        """Each message's count for `model`: its text's count by the tokenizer, plus its
        pictures by `model`'s provider rule. A message with picture parts whose sizes the
        transcript does not hold (a gateway call's) is left to its estimate."""
        sized = list(counts)
        for index, message in enumerate(transcript.messages):
            count = sized[index]
            if count is None or not has_picture_parts(message):
                continue
            sizes = transcript.pictures.get(index)
            sized[index] = None if sizes is None else count + self.picture_tokens(model, sizes)
        return sized

    def plan(
        self,
        route: Route,
        transcript: Transcript,
        *,
        caller: str,
        tools: list[dict[str, Any]] | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        cache_scope: str | None = None,
    ) -> Plan:
        """A send of `caller`'s (its owner key), fitted to the route's first model.
        `cache_scope` names what the call's cache key is derived from (a conversation's
        id); without one the call carries no key."""
        fit = self.fit_for(
            route, route.primary, transcript, caller=caller, tools=tools, max_tokens=max_tokens
        )
        key = self.keys.key(cache_scope) if cache_scope is not None else None
        return Plan(route, transcript, fit, caller, tools, max_tokens, key, temperature)

    async def count_missing(
        self, model: ModelSpec, transcript: Transcript
    ) -> tuple[Transcript, Counted | None]:
        """Count, with `model`'s own tokenizer, the messages that have no count for it yet
        (history written before, or for another model). Newest first and a batch at a
        time, keeping every batch that was counted, so a long uncounted history is counted
        over a few sends even through a slow engine. Counting never fails a send: what
        could not be counted is sized by the estimate."""
        tokenizer = self.tokenizer_for(model)
        if not tokenizer.exact:
            return transcript, None
        messages = transcript.messages
        known = list(transcript.counts.get(tokenizer.id) or [None] * len(messages))
        missing = [
            i
            for i in reversed(range(len(messages)))
            if known[i] is None
            and countable_text(messages[i]) is not None
            and (i in transcript.pictures or not has_picture_parts(messages[i]))
        ]
        counted: dict[int, int] = {}
        for start in range(0, min(len(missing), COUNT_AT_MOST), COUNT_BATCH):
            batch = missing[start : start + COUNT_BATCH]
            try:
                numbers = await tokenizer.count([countable_text(messages[i]) or "" for i in batch])
            except Exception as error:  # any failure of a tokenizer: estimate instead
                log.warning("could not count with %s: %s; estimating", tokenizer.id, error)
                break
            counted.update(zip(batch, numbers, strict=True))
        if not counted:
            return transcript, None
        ids = transcript.ids
        stored: dict[int, int] = {}
        for index, count in counted.items():
            known[index] = count
            row = ids[index] if ids is not None else None
            if row is not None:
                stored[row] = count
            elif messages[index].get("role") == "system":
                self._remember_system_count(tokenizer.id, messages[index]["content"], count)
        updated = dataclasses.replace(transcript, counts={**transcript.counts, tokenizer.id: known})
        return updated, Counted(tokenizer.id, stored) if stored else None

    def system_counts(self, route: Route, text: str) -> dict[str, int]:
        """The counts of a system prompt this process has made, by tokenizer: a prompt has
        no row to keep them on, and without them every send would count it again."""
        found = {}
        for tokenizer in self.exact_tokenizers(route):
            count = self._system_counts.get((tokenizer, text))
            if count is not None:
                found[tokenizer] = count
        return found

    def _remember_system_count(self, tokenizer: str, text: str, count: int) -> None:
        if len(self._system_counts) >= SYSTEM_COUNTS_KEPT:
            self._system_counts.pop(next(iter(self._system_counts)))
        self._system_counts[(tokenizer, text)] = count

    async def _attempt(
        self, plan: Plan, transcript: Transcript, model: ModelSpec, first: bool
    ) -> tuple[Transcript, FitResult, Counted | None]:
        """The fit to send to `model`: the plan's own for its first try when nothing had to
        be counted, a fresh one (new counts, window or calibration) for every other."""
        transcript, counted = await self.count_missing(model, transcript)
        if first and transcript is plan.transcript:
            return transcript, plan.fit, None
        result = self.fit_for(
            plan.route,
            model,
            transcript,
            caller=plan.caller,
            tools=plan.tools,
            max_tokens=plan.max_tokens,
        )
        return transcript, result, counted

    async def stream(
        self, plan: Plan, sent: Callable[[], None] | None = None
    ) -> AsyncGenerator[StreamEvent, None]:
        """Send a plan and stream the answer. Everything that can go wrong before the first
        chunk (a refused prompt, a model that is down) is handled here, with a `Fitted`
        for every fit made after the plan's; after the first chunk nothing can be pruned
        any more and errors reach the caller. `sent` goes to each request made (see
        `Provider.stream_chat`)."""
        route = plan.route
        transcript = plan.transcript
        failures: list[tuple[str, ProviderError]] = []
        for index, model in enumerate(route.models):
            retried = False
            while True:
                first = index == 0 and not retried
                transcript, result, counted = await self._attempt(plan, transcript, model, first)
                if counted is not None:
                    yield counted
                if result is not plan.fit:
                    yield Fitted(result)
                chunks = self.provider_for(model).stream_chat(
                    model.model_id,
                    result.messages,
                    max_tokens=self.max_tokens_for(route, plan.max_tokens),
                    tools=plan.tools,
                    info=_call_info(result, plan.cache_key),
                    sent=sent,
                    temperature=plan.temperature,
                )
                async with aclosing(chunks):
                    try:
                        # The engine's progress through the prompt comes before the
                        # answer: a failure after it can still fall back.
                        opening = await anext(chunks, None)
                        while opening is not None and opening.progress is not None:
                            yield Prefilling(opening.progress)
                            opening = await anext(chunks, None)
                    except ContextLengthExceeded as error:
                        await self._tighten(model, result, error, plan.caller)
                        if retried:
                            raise
                        retried = True
                        continue
                    except ProviderError as error:
                        if not error.retryable:
                            raise
                        log.warning(
                            "model %s failed before answering: %s", model.name, error.message
                        )
                        failures.append((model.name, error))
                        break
                    finish_reason: str | None = None
                    usage: Usage | None = None
                    chunk = opening
                    while chunk is not None:
                        if chunk.progress is not None:
                            yield Prefilling(chunk.progress)
                        if chunk.text:
                            yield Delta(chunk.text)
                        finish_reason = chunk.finish_reason or finish_reason
                        usage = chunk.usage or usage
                        chunk = await anext(chunks, None)
                await self._learn(model, result, usage, plan)
                yield Finished(model.name, finish_reason, usage)
                return
        raise AllModelsFailed(failures)

    async def chat(self, plan: Plan) -> tuple[ChatResult, FitResult, str]:
        """A bounded, non-streamed chat or tool call: (answer, the fit that was sent, model)."""
        route = plan.route
        transcript = plan.transcript
        failures: list[tuple[str, ProviderError]] = []
        for index, model in enumerate(route.models):
            for attempt in range(2):
                first = index == 0 and attempt == 0
                transcript, result, _ = await self._attempt(plan, transcript, model, first)
                try:
                    answer = await self.provider_for(model).chat(
                        model.model_id,
                        result.messages,
                        max_tokens=self.max_tokens_for(route, plan.max_tokens),
                        tools=plan.tools,
                        info=_call_info(result, plan.cache_key),
                        temperature=plan.temperature,
                    )
                except ContextLengthExceeded as error:
                    await self._tighten(model, result, error, plan.caller)
                    if attempt:
                        raise
                    continue
                except ProviderError as error:
                    if not error.retryable:
                        raise
                    failures.append((model.name, error))
                    break
                await self._learn(model, result, answer.usage, plan)
                return answer, result, model.name
        raise AllModelsFailed(failures)

    async def complete(
        self, model_name: str, prompt: str, *, max_tokens: int | None = None
    ) -> tuple[CompletionResult, CompletionReport | None]:
        """A raw completion is the caller's exact text: never pruned; an overflow is reported."""
        model = self.catalog.models[model_name]
        reserve = reserve_of(max_tokens, model)
        budget = budget_for(self.serving(model), reserve)
        estimate = await estimate_texts([prompt]) + REPLY_PRIMING
        report = None
        if estimate * self.calibrator.factor(model.name) > budget:
            report = CompletionReport(model.name, budget, estimate)
            log.warning(
                "completion larger than the budget: model=%s budget=%d estimate=%d; sent unpruned",
                model.name,
                budget,
                estimate,
            )
        result = await self.provider_for(model).complete(
            model.model_id, prompt, max_tokens=max_tokens
        )
        return result, report

    async def embed(self, model_name: str, inputs: Sequence[str]) -> list[list[float]]:
        """Embeddings are not bounded: each input is the caller's to size."""
        model = self.catalog.models[model_name]
        return await self.provider_for(model).embed(model.model_id, list(inputs))

    async def _tighten(
        self, model: ModelSpec, result: FitResult, error: ContextLengthExceeded, caller: str
    ) -> None:
        """What a refusal teaches: the engine's window (the model's, for everyone: the
        engine's own statement), else the refused caller's own figures, so its retry fits."""
        limit = error.limit
        # The engine names a window smaller than the one fitted to (its -c is smaller than
        # the catalog's): that is what to fit to. When its count of the prompt was within
        # ours, the window explains the refusal and nothing else is tightened.
        if (
            limit is not None
            and 0 < limit < result.window
            and (error.prompt_tokens is None or error.prompt_tokens + result.reserve > limit)
            and await self.calibrator.learn_window(model.name, limit)
        ):
            if error.prompt_tokens is not None and error.prompt_tokens <= result.estimated_tokens:
                return
            limit = None  # learned as the window; the factor must not absorb it too
        if result.counted_tokens is not None:
            # Counted exactly, refused all the same: the template costs more than we think.
            await self.calibrator.tighten_overhead(model.name, caller=caller)
            return
        await self.calibrator.tighten(
            model.name,
            result.raw_estimate,
            error.prompt_tokens,
            caller=caller,
            limit=limit,
            budget=result.budget,
            reserve=result.reserve,
        )

    async def _learn(
        self,
        model: ModelSpec,
        result: FitResult,
        usage: Usage | None,
        plan: Plan,
    ) -> None:
        """Learn from what the provider counted, against sizes the app made itself: the raw
        estimate is the app's own (an import's sizes are re-estimated), and the overhead
        learns only from prompts whose every part was counted (a `name`, a tool call or a
        tool schema is not: see `countable_text`). A prompt that carried a picture teaches
        nothing: the provider's count of a picture is its own, and the rule's figure (which
        errs high) would skew the factor and the overhead of every text-only send. What is
        learned is the plan's caller's own figure; the model's shared one moves only when
        distinct callers agree, so one caller cannot move the bound of anyone else.
        (llama-cpp-python reports no usage on streams: then nothing is learned, and the
        defaults, which err high, stay.)"""
        if usage is None or not usage.prompt_tokens or carries_pictures(result.messages):
            return
        caller = plan.caller
        await self.calibrator.observe(
            model.name, result.raw_estimate, usage.prompt_tokens, caller=caller
        )
        if result.counted_tokens is not None and not plan.tools:
            await self.calibrator.observe_overhead(
                model.name,
                result.counted_tokens,
                result.sent_messages,
                usage.prompt_tokens,
                fixed=REPLY_PRIMING,
                caller=caller,
            )


def _call_info(result: FitResult, cache_key: str | None) -> CallInfo:
    return CallInfo(
        model=result.model,
        window=result.window,
        budget=result.budget,
        estimated_tokens=result.estimated_tokens,
        dropped_turns=result.dropped_turns,
        reserve=result.reserve,
        cache_marks=cache_marks(result.messages),
        cache_key=cache_key,
    )


def cache_marks(messages: Sequence[Message]) -> tuple[int, ...]:
    """Where the prompt's lasting prefixes end: after the head (system prompt and opening
    exchange, which every send keeps, however the cut moves) and after the whole prompt
    (what the next send of the branch starts with while the cut holds)."""
    if not messages:
        return ()
    preamble, turns = split_turns(messages)
    head = turns[0][-1] if len(turns) > 1 else (preamble[-1] if preamble else None)
    return tuple(sorted({len(messages) - 1} | ({head} if head is not None else set())))
