"""The pipeline's ``spark:`` section: where a window's Spark work runs, and for how long at most."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from connectors.models import ConnId, Duration, StrictModel


class SparkConfig(StrictModel):
    mode: Literal["connect", "inprocess", "submit"] = Field(
        default="connect", description="connect: the long-lived Spark Connect server (scripts/services.sh start "
        "spark); inprocess: a Spark started inside the task; submit: SparkSubmitOperator.")
    remote: str | None = Field(default=None, pattern=r"^sc://[^/\s]+", description="Spark Connect URL for mode "
                               "connect, sc://host:port. Default: $CDCFLOW_SPARK_REMOTE or sc://127.0.0.1:15002.")
    master: str | None = Field(default=None, description="Default: $CDCFLOW_SPARK_MASTER or local[*].")
    conn_id: ConnId = "spark_default"
    conf: dict[str, str] = Field(default_factory=dict)
    timeout: Duration = Field(default=1800.0, description="The longest a window's Spark work may take: past it, the "
                              "window's operations are cancelled on the server and the window fails alone, so no "
                              "window holds the shared Spark forever.")
