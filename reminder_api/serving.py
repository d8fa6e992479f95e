"""uvicorn under the process's own stop handlers (`reminders api`, `reminders dev`)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

import uvicorn


class StopEventServer(uvicorn.Server):
    """A uvicorn server that shuts down gracefully once `stop` is set, and leaves SIGTERM
    and SIGINT to the handlers of `reminder_core.worker.signals.install_stop_handlers`
    (which set `stop` on the first signal and stop the process hard on a second).

    uvicorn's own `capture_signals` holds every signal it gets while it serves and, once
    it has shut down, raises them again, one after another and last first. Under our
    handlers that turned a user's real second Ctrl-C into "the same signal twice within
    REPEAT_WINDOW_S" (one soft stop, status 0 after the whole grace, instead of 130), and
    SIGTERM then SIGINT was logged as a "second SIGTERM" (trial helper-54). Here a signal
    is handled once, when it arrives.

    Args:
        config: uvicorn's configuration.
        stop: set by the stop handlers or by the program; the server then stops as on
            SIGTERM (`should_exit`: drain connections up to `timeout_graceful_shutdown`).
    """

    def __init__(self, config: uvicorn.Config, stop: threading.Event) -> None:
        super().__init__(config)
        self._stop = stop

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """Replace uvicorn's signal capture: watch `stop` on a daemon thread instead."""
        threading.Thread(target=self._exit_on_stop, name="stop-watch", daemon=True).start()
        yield

    def _exit_on_stop(self) -> None:
        self._stop.wait()
        self.should_exit = True


__all__ = ["StopEventServer"]
