"""What the LLM planner asks the model for, and how an answer is read: the ``LLMDecision`` models.

The JSON schema the model must follow (``DECISION_SCHEMA``) is generated from these models, in the
strict subset of OpenAI's structured outputs; the system prompt shows it from there
(``agent.planning.llm_context``). Reading is more tolerant than the schema (aliases such as ``flag`` for
``name``, numbers as strings, a list of changes) so that a refusal can say what was wrong.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic.json_schema import SkipJsonSchema

from agent.domain.models import FlagValue

_THINK = re.compile(r"<think>.*?</think>", re.S | re.I)


class DecisionError(ValueError):
    """A model answer that cannot be read as a decision; the message says what is wrong (one line)."""


class LLMChange(BaseModel):
    """One change as the model writes it. ``value``: a string, ``true`` for a switch, ``null`` to remove."""

    kind: Literal["flag", "env"] = Field(default="flag", description="a launch_server flag, or an environment variable")
    name: str = Field(
        validation_alias=AliasChoices("name", "flag", "variable"),
        description="canonical --flag-name, or an environment variable name",
    )
    value: FlagValue = Field(
        default=None,
        validation_alias=AliasChoices("value", "after", "to"),
        description="true for a switch; null removes it",
    )

    @field_validator("value", mode="before")
    @classmethod
    def _plain(cls, v: Any) -> Any:
        if isinstance(v, int | float) and not isinstance(v, bool):
            return str(v)
        return v

    def text(self) -> str:
        """``name=value`` as the model wrote it."""
        return f"{self.name}={json.dumps(self.value)}"


class LLMHypothesis(BaseModel):
    """A hypothesis the model adds: a claimed cause, its weight, and the one change that tests it."""

    id: str = Field(description="a short slug")
    statement: str = Field(description="the claimed cause")
    component: str = Field(default="unknown", description="where the cause lives, e.g. attention.decode")
    prior: float = Field(default=0.1, description="its weight now, 0.01 to 0.5")
    test: LLMChange | None = Field(default=None, description="the one change that tests it")
    decisive: bool = Field(default=True, description="true when that change must fix the failure if it holds")

    @field_validator("prior", mode="before")
    @classmethod
    def _prior(cls, v: Any) -> Any:
        try:
            return min(max(float(v), 0.01), 0.5)
        except (TypeError, ValueError):
            return 0.1


class LLMNote(BaseModel):
    """The model's comment on an existing hypothesis."""

    id: str = Field(description="an existing hypothesis id")
    assessment: str = Field(description="why it is more or less likely now")


class LLMExperiment(BaseModel):
    """The proposed experiment: its change (exactly one is legal), what it tests, and why."""

    change: LLMChange | SkipJsonSchema[None] = Field(
        default=None, description="the one change against the current baseline"
    )
    #: Further changes the model wrote: kept so that the proposal is refused with that reason, never
    #: silently cut to one. Not part of the schema the model is asked to follow.
    more: SkipJsonSchema[list[LLMChange]] = Field(default_factory=list)
    tests: list[str] = Field(default_factory=list, description="the hypothesis ids this change tests")
    rationale: str = Field(default="", description="why this change now, and what each outcome would tell")

    @model_validator(mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        # Models write {"change": {...}}, {"change": [{...}, {...}]} or {"changes": [...]}.
        if isinstance(v, dict) and ("changes" in v or isinstance(v.get("change"), list)):
            listed = v.get("changes", v.get("change"))
            listed = listed if isinstance(listed, list) else ([listed] if listed else [])
            rest = {k: x for k, x in v.items() if k not in ("change", "changes")}
            v = {**rest, "change": listed[0] if listed else None, "more": listed[1:]}
        return v

    @property
    def changes(self) -> list[LLMChange]:
        """Every change the model wrote (one is legal)."""
        return ([self.change] if self.change is not None else []) + self.more


class LLMDecision(BaseModel):
    """One answer of the model (``DECISION_SCHEMA``)."""

    reasoning: str = Field(default="", description="two or three sentences on what the evidence says")
    new_hypotheses: list[LLMHypothesis] = Field(default_factory=list, description="causes the ledger lacks")
    notes: list[LLMNote] = Field(default_factory=list, description="comments on existing hypotheses")
    action: Literal["experiment", "conclude"]
    experiment: LLMExperiment | None = Field(default=None, description="the next experiment (action experiment)")
    conclusion: str | None = Field(default=None, description="why nothing left is worth a launch (action conclude)")

    @model_validator(mode="before")
    @classmethod
    def _infer_action(cls, v: Any) -> Any:
        if isinstance(v, dict) and not v.get("action"):
            v = {
                **v,
                "action": "experiment"
                if v.get("experiment")
                else ("conclude" if v.get("conclusion") else None),
            }
        if isinstance(v, dict):
            for key in ("new_hypotheses", "notes"):
                if v.get(key) is None:
                    v = {**v, key: []}
        return v


def strict_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON schema in the strict subset of OpenAI's structured outputs: references inlined,
    every property required (an optional one as ``anyOf`` with null), no additional properties, no
    titles or defaults. vLLM, SGLang and Ollama accept it as well."""
    raw = model.model_json_schema(mode="validation")
    defs = raw.pop("$defs", {})

    def strict(node: Any) -> Any:
        if isinstance(node, list):
            return [strict(x) for x in node]
        if not isinstance(node, dict):
            return node
        if "$ref" in node:  # a model's docstring is for readers of the code; the field says what it is
            target = {k: v for k, v in defs[node["$ref"].rsplit("/", 1)[-1]].items() if k != "description"}
            return strict({**target, **{k: v for k, v in node.items() if k != "$ref"}})
        out = {k: strict(v) for k, v in node.items() if k not in ("title", "default")}
        if out.get("type") == "object" and "properties" in out:
            out["additionalProperties"] = False
            out["required"] = list(out["properties"])
        return out

    raw.pop("description", None)
    schema: dict[str, Any] = strict(raw)
    return schema


def schema_outline(node: dict[str, Any], indent: int = 0) -> str:
    """A JSON schema as the shape of a conforming object, each value saying what goes there: the form
    the system prompt shows the model (``{"action": "experiment" | "conclude", ...}``)."""
    pad = " " * (indent + 1)
    note = node.get("description")
    if "anyOf" in node:
        kinds = [k for k in node["anyOf"] if k.get("type") != "null"]
        if all(set(k) <= {"type"} for k in kinds):  # scalars: one placeholder
            return f"<{' | '.join(k['type'] for k in kinds)}{': ' + note if note else ''}> | null"
        return " | ".join(schema_outline({"description": note, **k}, indent) for k in kinds) + " | null"
    if "enum" in node:
        return " | ".join(json.dumps(e) for e in node["enum"])
    kind = node.get("type")
    if kind == "object":
        fields = [f"{pad}{json.dumps(k)}: {schema_outline(v, indent + 1)}" for k, v in node["properties"].items()]
        return "{\n" + ",\n".join(fields) + "\n" + " " * indent + "}"
    if kind == "array":
        items = node["items"] if node["items"].get("type") == "object" else {"description": note, **node["items"]}
        return "[" + schema_outline(items, indent) + ", ...]"
    return f"<{kind}{': ' + note if note else ''}>"


#: The JSON schema of an answer, generated from ``LLMDecision``: sent as the response format, and shown
#: in the system prompt as an outline (``DECISION_OUTLINE``, used by ``agent.planning.llm_context``).
DECISION_SCHEMA: dict[str, Any] = strict_schema(LLMDecision)
DECISION_OUTLINE = schema_outline(DECISION_SCHEMA)


def extract_json(text: str) -> dict[str, Any]:
    """The first JSON object in a model's text: whole text, inside a code fence, or after prose.

    ``<think>...</think>`` blocks of reasoning models are skipped. Raises DecisionError when there is
    none.
    """
    body = _THINK.sub("", text).strip()
    try:
        obj = json.loads(body)
        if isinstance(obj, dict):
            return obj
    except ValueError:
        pass
    decoder = json.JSONDecoder()
    tries = 0
    for i, ch in enumerate(body):
        if ch != "{":
            continue
        tries += 1
        if tries > 64:
            break
        try:
            obj, _ = decoder.raw_decode(body, i)
        except ValueError:
            continue
        if isinstance(obj, dict):
            return obj
    snippet = " ".join(body.split())[:120]
    raise DecisionError(f"the answer holds no JSON object (starts: {snippet!r})")


def parse_decision(text: str) -> LLMDecision:
    """Read a model answer into an LLMDecision; raises DecisionError naming the first problem."""
    obj = extract_json(text)
    try:
        return LLMDecision.model_validate(obj)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        raise DecisionError(f"the JSON object does not match the schema: {where}: {err['msg']}") from None
