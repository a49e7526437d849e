"""``source.schema_registry``: the Schema Registry a registry converter (avro, protobuf,
json_schema_registry) reads its schemas from, named by an Airflow connection (the URL from its host,
schema and port or ``extra.url``; Basic auth from its login and password, or ``extra.bearer_token``)."""

from __future__ import annotations

from pydantic import Field

from connectors.models import ConnId, Duration, StrictModel

REGISTRY_CONVERTERS = ("avro", "protobuf", "json_schema_registry")  # the converters that read through a registry


class SchemaRegistryConfig(StrictModel):
    """Where a registry converter's schemas come from."""

    conn_id: ConnId = Field(description="The Airflow connection of the Schema Registry (Confluent Schema Registry, "
                            "Apicurio Registry's ccompat API, Karapace): host, port (default 8081), schema http or "
                            "https; login/password for Basic auth, or extra.bearer_token; extra.url for a whole URL "
                            "with a path (Apicurio: http://host:8080/apis/ccompat/v7).")
    timeout: Duration = Field(default=10.0, description="Seconds per registry request; a registry slower than "
                              "this fails the window as if it were down.")
