"""The requests the gateway accepts, checked before anything is sent.

Only what the send pipeline can honour is modelled; OpenAI's sampling parameters
(temperature, top_p, stop, seed, ...) are accepted and not forwarded, because the
pipeline sends messages, tools and max_tokens only. A parameter whose silent loss
would change the answer's shape (`n` > 1, a forced `tool_choice`, a streamed
completion) is refused with a 400 naming it, rather than ignored.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Annotated, Any, Literal

import msgspec
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from webapp.gateway.errors import GatewayError, invalid

PositiveInt = Annotated[int, Field(gt=0, strict=True)]


class _Lenient(BaseModel):
    """Unknown fields are dropped: clients send many we do not forward."""

    model_config = ConfigDict(extra="ignore")


class FunctionCall(_Lenient):
    name: str = Field(min_length=1)
    arguments: str = ""


class ToolCall(_Lenient):
    id: str = Field(min_length=1)
    type: Literal["function"] = "function"
    function: FunctionCall


class ContentPart(BaseModel):
    """A part of a message's content; text and images are passed on as they came."""

    model_config = ConfigDict(extra="allow")
    type: Literal["text", "image_url", "input_audio", "file"]
    text: str | None = None

    @model_validator(mode="after")
    def _text_parts_have_text(self) -> ContentPart:
        if self.type == "text" and self.text is None:
            raise ValueError("a text part needs 'text'")
        return self


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> ChatMessage:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs 'tool_call_id'")
        if self.role == "assistant":
            if self.content is None and not self.tool_calls:
                raise ValueError("an assistant message needs 'content' or 'tool_calls'")
        elif self.content is None:
            raise ValueError(f"a {self.role} message needs 'content'")
        return self

    def wire(self) -> dict[str, Any]:
        """The message as providers take it. `developer` is OpenAI's newer name for the
        system role; most OpenAI-compatible servers know only `system`."""
        message = self.model_dump(exclude_none=True)
        if message["role"] == "developer":
            message["role"] = "system"
        return message


class FunctionSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_-]+$")
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Lenient):
    type: Literal["function"]
    function: FunctionSpec


class StreamOptions(_Lenient):
    include_usage: bool = False


class ChatCompletionRequest(_Lenient):
    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["auto", "none"] | None = None
    max_tokens: PositiveInt | None = None
    max_completion_tokens: PositiveInt | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: Literal[1] | None = None
    prompt_cache_key: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    user: Annotated[str, Field(min_length=1, max_length=1024)] | None = None

    @property
    def cache_scope(self) -> str | None:
        """What the caller keeps its calls together by (its `prompt_cache_key`, else its
        `user`), or None: a stateless call carries a key only when the caller gave one."""
        if self.prompt_cache_key:
            return f"key:{self.prompt_cache_key}"
        return f"user:{self.user}" if self.user else None

    @property
    def answer_limit(self) -> int | None:
        """The answer's room: `max_completion_tokens` is the newer name of `max_tokens`."""
        return self.max_completion_tokens or self.max_tokens

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def wire_tools(self) -> list[dict[str, Any]] | None:
        """The tool schemas to send (and count); `tool_choice: "none"` sends none."""
        if not self.tools or self.tool_choice == "none":
            return None
        return [tool.model_dump(exclude_none=True) for tool in self.tools]


class CompletionRequest(_Lenient):
    model: str = Field(min_length=1)
    prompt: str | list[str]
    max_tokens: PositiveInt | None = None
    stream: Literal[False] = False
    n: Literal[1] | None = None

    @property
    def text(self) -> str:
        if isinstance(self.prompt, str):
            return self.prompt
        if len(self.prompt) != 1:
            raise invalid("this gateway takes one prompt per completion", param="prompt")
        return self.prompt[0]


class EmbeddingRequest(_Lenient):
    model: str = Field(min_length=1)
    input: str | list[Annotated[str, Field(min_length=1)]]
    encoding_format: Literal["float", "base64"] = "float"

    @property
    def inputs(self) -> list[str]:
        inputs = [self.input] if isinstance(self.input, str) else self.input
        if not inputs or not all(text for text in inputs):
            raise invalid("'input' must be a non-empty string or array of strings", "input")
        return inputs


_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


def _param(location: tuple[int | str, ...]) -> str | None:
    """Pydantic's error location as OpenAI spells a `param`: messages[2].content."""
    param = ""
    for part in location:
        if isinstance(part, int):
            param += f"[{part}]"
        elif part in _TYPE_NAMES or not part.isidentifier():
            continue  # which alternative of a union failed ("list[str]"): noise to a caller
        else:
            param += f".{part}" if param else str(part)
    return param or None


MAX_TOOLS = 128
"""Tool definitions one call may carry (OpenAI's own limit)."""
MAX_TOOLS_BYTES = 2**20
"""The JSON of a call's tool definitions, at most: every fit estimates it again."""

_LISTS = frozenset({"messages"})
"""Fields read as a list of undecoded elements, so they are counted before anything of
them is parsed."""
_LONE_SURROGATE = re.compile(
    rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


@cache
def _envelope(model: type[BaseModel]) -> type[msgspec.Struct]:
    """The request's own fields, each left undecoded (msgspec.Raw); unknown fields are
    skipped without being built, and `messages` is a list of undecoded messages, so the
    body is checked as JSON and its messages counted at C speed before anything is
    parsed into objects."""
    fields: list[tuple[str, Any, Any]] = []
    for name in model.model_fields:
        kind: Any = list[msgspec.Raw] if name in _LISTS else msgspec.Raw
        fields.append((name, kind | msgspec.UnsetType, msgspec.UNSET))
    return msgspec.defstruct(f"{model.__name__}Envelope", fields)


def too_long(param: str, limit: int, length: int) -> GatewayError:
    """OpenAI's refusal of an array longer than it takes."""
    return invalid(
        f"Invalid '{param}': array too long. Expected an array with maximum length "
        f"{limit}, but got an array with length {length} instead.",
        param=param,
        code="array_above_max_length",
    )


def _not_json(raw: bytes, error: Exception) -> GatewayError:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        return invalid(f"The body of the request is not valid UTF-8 (byte {bad.start}).")
    if _LONE_SURROGATE.search(raw):
        return invalid(
            "The body of the request is not valid JSON: it holds a lone UTF-16 surrogate "
            "(an escape from \\ud800 to \\udfff without its pair), which is no character."
        )
    return invalid(f"The body of the request is not valid JSON ({error}).")


def _decode(model: type[BaseModel], raw: bytes, max_items: int | None) -> Any:
    """The body as Python values, only the fields `model` has; a body that is not JSON,
    or whose messages are more than `max_items`, is refused before it is built."""
    try:
        try:
            envelope = msgspec.json.decode(raw, type=_envelope(model))
        except msgspec.ValidationError:
            # Not an object, or a field of the wrong kind: the model's own check says which.
            return msgspec.json.decode(raw)
        found = {
            name: value
            for name in envelope.__struct_fields__
            if (value := getattr(envelope, name)) is not msgspec.UNSET
        }
        messages = found.get("messages")
        if max_items is not None and messages is not None and len(messages) > max_items:
            raise too_long("messages", max_items, len(messages))
        tools = found.get("tools")
        if tools is not None and len(tools) > MAX_TOOLS_BYTES:
            raise invalid(
                f"Invalid 'tools': the tool definitions are {len(tools):,} bytes of JSON; "
                f"at most {MAX_TOOLS_BYTES:,} are taken.",
                param="tools",
            )
        return {
            name: [msgspec.json.decode(item) for item in value]
            if name in _LISTS
            else msgspec.json.decode(value)
            for name, value in found.items()
        }
    except msgspec.DecodeError as error:
        raise _not_json(raw, error) from None
    except RecursionError:
        raise invalid("The body of the request is nested too deeply.") from None


def _check_items(data: dict[str, Any], max_items: int) -> None:
    """What validation would cost in proportion to: messages, their content parts and
    tool calls, embedding inputs, tool definitions. Counted on the plain values (as many
    steps as there are messages), before the model builds an object of each."""
    messages = data.get("messages")
    if isinstance(messages, list):
        if len(messages) > max_items:
            raise too_long("messages", max_items, len(messages))
        parts = 0
        for message in messages:
            if isinstance(message, dict):
                for key in ("content", "tool_calls"):
                    value = message.get(key)
                    parts += len(value) if isinstance(value, list) else 0
        if parts > max_items:
            raise invalid(
                f"Invalid 'messages': {parts:,} content parts and tool calls in all; "
                f"at most {max_items:,} are taken.",
                param="messages",
                code="array_above_max_length",
            )
    inputs = data.get("input")
    if isinstance(inputs, list) and len(inputs) > max_items:
        raise too_long("input", max_items, len(inputs))
    tools = data.get("tools")
    if isinstance(tools, list) and len(tools) > MAX_TOOLS:
        raise too_long("tools", MAX_TOOLS, len(tools))


def parse(model: type[BaseModel], raw: bytes, max_items: int | None = None) -> Any:
    """The request body as `model`, or a 400 naming the first wrong parameter. With
    `max_items`, a body of more messages (or content parts and tool calls, or embedding
    inputs) is refused before they are parsed (see `_check_items`)."""
    data = _decode(model, raw, max_items) if raw else None
    if not isinstance(data, dict):
        raise invalid("The body of the request must be a JSON object.")
    if max_items is not None:
        _check_items(data, max_items)
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        param = _param(tuple(first["loc"]))
        message = first["msg"].removeprefix("Value error, ")
        text = f"Invalid parameter {param}: {message}" if param else f"Invalid request: {message}"
        raise GatewayError(400, text, param=param) from None
