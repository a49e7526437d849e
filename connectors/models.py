"""The small typed pieces every config model is made of: strict models, durations, names.

The ground floor of the config: the sink, Spark and transform models (connectors/*/config.py,
spark_jobs/) and the pipeline model (cdcflow/config.py) build on it.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import InitErrorDetails, PydanticCustomError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$")


def parse_duration(value: Any) -> Any:
    """Accept seconds as a number or a string like ``90s``, ``5m``, ``1h``, ``500ms``."""
    if isinstance(value, str):
        match = _DURATION.match(value)
        if not match:
            raise ValueError(f"expected a duration such as 30, '30s', '5m' or '1h', got {value!r}")
        number, unit = float(match.group(1)), match.group(2) or "s"
        return number * {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}[unit]
    return value


Duration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0, le=86400)]
Period = Annotated[float, BeforeValidator(parse_duration), Field(gt=0, le=3650 * 86400)]
Identifier = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[^\x00]+$")]
TopicName = Annotated[str, Field(pattern=r"^[A-Za-z0-9._-]{1,249}$")]
ConnId = Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,250}$")]


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)



def field_errors(model: str, problems: list[tuple[tuple[str | int, ...], str, Any]]) -> ValidationError:
    """A cross-field check's problems, each reported on its own field ((field path, message, value)):
    raised from a model validator, the config's errors name the field and its line, not the model."""
    return ValidationError.from_exception_data(model, [
        InitErrorDetails(type=PydanticCustomError("value_error", message), loc=loc, input=value)
        for loc, message, value in problems])
