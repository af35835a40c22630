"""The server's default limits, apart from the app so that the CLI reads them without starlette (an extra)."""

MAX_BODY = 1 << 20  # bytes: a megabyte of text is far more than any model here reads at once
MAX_BATCH = 16  # generation requests decoded together
