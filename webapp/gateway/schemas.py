"""The requests the gateway accepts, checked before anything is sent.

Only what the send pipeline can honour is modelled; OpenAI's sampling parameters
(temperature, top_p, stop, seed, ...) are accepted and not forwarded, because the
pipeline sends messages, tools and max_tokens only. A parameter whose silent loss
would change the answer's shape (`n` > 1, a forced `tool_choice`, a streamed
completion) is refused with a 400 naming it, rather than ignored.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

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


def parse(model: type[BaseModel], raw: bytes) -> Any:
    """The request body as `model`, or a 400 naming the first wrong parameter."""
    try:
        data = json.loads(raw) if raw else None
    except ValueError:
        raise invalid("The body of the request is not valid JSON.") from None
    if not isinstance(data, dict):
        raise invalid("The body of the request must be a JSON object.")
    try:
        return model.model_validate(data)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        param = _param(tuple(first["loc"]))
        message = first["msg"].removeprefix("Value error, ")
        text = f"Invalid parameter {param}: {message}" if param else f"Invalid request: {message}"
        raise GatewayError(400, text, param=param) from None
