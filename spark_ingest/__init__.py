"""PySpark Structured Streaming ingest of MQTT telemetry."""
