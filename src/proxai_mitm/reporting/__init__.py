"""What users see and export: the LLM view, reports, HAR and OpenTelemetry."""
