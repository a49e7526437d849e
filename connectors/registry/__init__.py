"""Schema Registry converters: records written by Confluent's AvroConverter, JsonSchemaConverter and
ProtobufConverter (a magic byte, a 4-byte schema id, then the encoded value), read by transcoding each
one into what Kafka Connect's JsonConverter (``schemas.enable=true``) writes for the same Connect
record, so that every type of docs/types.md is read by the Debezium decoder's own machinery.

    wire.py         the framing: magic byte, schema id, Protobuf's message indexes
    client.py       the registry's REST API: schemas by id, fetched once per process
    connect.py      Connect schema JSON and the JsonConverter's value forms (shared by the three)
    avro.py         Avro schemas (Confluent's AvroData conventions) -> a compiled transcoder per id
    json_schema.py  JSON Schemas (Confluent's JsonSchemaData conventions) -> a transcoder per id
    protobuf.py     Protobuf schemas (Confluent's ProtobufData conventions) -> a transcoder per id
    decode.py       the read task's decoder: transcodes a batch, then decodes it as Debezium JSON
"""
