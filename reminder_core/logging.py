"""Process logging setup (called from main(), never at import)."""

from __future__ import annotations

import logging


def configure_logging(level: str = "INFO") -> None:
    """Human-readable logs on stderr: time, level, logger, message."""
    logging.basicConfig(
        level=level.upper(),
        format="%(asctime)s %(levelname)-7s %(name)s: %(message)s",
        force=True,
    )
    logging.getLogger("uvicorn.access").setLevel(logging.WARNING)
    logging.getLogger("pgserver").setLevel(logging.WARNING)  # logs every initdb line at INFO
